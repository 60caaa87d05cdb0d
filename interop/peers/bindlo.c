/*
 * Loopback bind shim for freeDiameter 1.2.1 (LD_PRELOAD).
 *
 * freeDiameter 1.2.1 removes loopback addresses from its ListenOn list
 * (fd_ep_add_merge skips 127.0.0.0/8 and ::1) and then listens on the
 * wildcard addresses 0.0.0.0 and [::]. The interop harness must keep all
 * traffic on loopback, so this shim turns a bind() to a wildcard address into
 * a bind() to a loopback address, and leaves every other bind() alone:
 *
 *   0.0.0.0 -> $DOIC_BIND_V4 (default 127.0.0.1)
 *   [::]    -> $DOIC_BIND_V6 (default ::1)
 *
 * Build: gcc -O2 -shared -fPIC -o bindlo.so bindlo.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static const char *env_or(const char *name, const char *fallback)
{
	const char *v = getenv(name);
	return (v && *v) ? v : fallback;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	static bind_fn next;
	if (!next)
		next = (bind_fn)dlsym(RTLD_NEXT, "bind");

	if (addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		struct sockaddr_in v4 = *(const struct sockaddr_in *)addr;
		if (v4.sin_addr.s_addr == htonl(INADDR_ANY) &&
		    inet_pton(AF_INET, env_or("DOIC_BIND_V4", "127.0.0.1"), &v4.sin_addr) == 1)
			return next(fd, (const struct sockaddr *)&v4, sizeof v4);
	}
	if (addr && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		struct sockaddr_in6 v6 = *(const struct sockaddr_in6 *)addr;
		if (IN6_IS_ADDR_UNSPECIFIED(&v6.sin6_addr) &&
		    inet_pton(AF_INET6, env_or("DOIC_BIND_V6", "::1"), &v6.sin6_addr) == 1)
			return next(fd, (const struct sockaddr *)&v6, sizeof v6);
	}
	return next(fd, addr, len);
}
