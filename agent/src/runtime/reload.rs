//! A reload applied to the running agent ([`crate::agent::Agent::reload`]):
//! the [`Plan`] of [`crate::config::reload`] carried out on the peer table,
//! the routing table and `[accept]`, while every connection that stays
//! configured keeps running.
//!
//! In this order: the removed peers are retired (their connections send
//! DPR, RFC 6733 §5.4, and close once their pending requests are answered
//! or the drain ends; no new request is routed to them); the added peers
//! get slots; the new routing table is published, which each connection
//! takes at its next wake-up ([`crate::routing::live`]); then the added
//! peers are dialled; a changed `[doic]` is published to the DOIC cores
//! ([`crate::overload::Overload::reconfigure`]: each worker's core applies
//! it at its next request, at that instant, its overload state kept; the
//! control thread at its next tick). A request routed meanwhile with the
//! previous table reaches a peer that is still open or is rerouted as on
//! any peer's closing: none is lost.

use std::sync::Arc;

use crate::config::{Config, Plan};
use crate::net::ConnCtx;
use crate::routing::{PeerView, Router};
use crate::runtime::Workers;

/// Applies `plan` (from the running configuration to `new`).
pub(crate) fn apply(ctx: &Arc<ConnCtx>, workers: &Workers, plan: &Plan, new: &Config) {
    let table = &ctx.relay.table;
    for host in &plan.remove {
        if let Some(slot) = table.by_host(host).and_then(|id| table.get(id)) {
            tracing::info!(peer = %host, "peer removed: DPR, then close once drained");
            slot.retire();
        }
    }
    let mut dial = Vec::new();
    for p in &plan.add {
        // An added TLS peer's files were loaded once by the reload's check
        // (`Config::check_runnable`); they are loaded for its dialling here.
        let client = match p.tls.as_ref().map(crate::tls::ClientTls::load) {
            None => None,
            Some(Ok(c)) => Some(Arc::new(c)),
            Some(Err(e)) => {
                tracing::error!(peer = %p.host, cause = %e, "peer not added: its TLS files do not load; fix them and reload");
                continue;
            }
        };
        let id = table.add_configured(p);
        tracing::info!(peer = %p.host, connect = %crate::net::OrNone(p.connect), "peer added");
        if let Some(addr) = p.connect {
            dial.push((id, addr, client));
        }
    }
    if plan.routes {
        ctx.relay
            .routes
            .publish(Router::from_config(new, |h| table.by_host(h)));
    }
    if plan.accept {
        ctx.set_accept(new.accept.clone());
    }
    if plan.doic
        && let (Some(ov), Some(cfg)) = (&ctx.relay.overload, new.doic_effective())
    {
        ov.reconfigure(&cfg);
    }
    for (id, addr, client) in dial {
        workers.spawn_dialer(
            id,
            crate::net::connect::dial_loop(ctx.clone(), id, addr, client),
        );
    }
    for key in &plan.needs_restart {
        if *key == "doic" {
            tracing::warn!(%key, "DOIC turned on or off: the cores are built at start; needs restart; the running value stays");
        } else {
            tracing::warn!(%key, "changed in the file but read only at start: needs restart; the running value stays");
        }
    }
    tracing::info!(
        added = plan.add.len(),
        removed = plan.remove.len(),
        routes = plan.routes,
        accept = plan.accept,
        doic = plan.doic,
        needs_restart = plan.needs_restart.len(),
        "configuration reloaded"
    );
}
