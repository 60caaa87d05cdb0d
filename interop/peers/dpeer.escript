#!/usr/bin/env escript
%% -*- erlang -*-
%%! +K true
%%
%% dpeer: a Diameter peer on Erlang/OTP's `diameter` application, used by the
%% interop harness (interop/src/erl.rs) as an independent RFC 6733 stack.
%% Plain TCP (diameter_tcp), loopback addresses only.
%% Needs the Debian packages erlang-base, erlang-diameter and erlang-dev.
%%
%% SERVER
%%   dpeer.escript server [--addr 127.0.0.1] [--port 3871] [--host erl-server.example.net]
%%                        [--realm example.net] [--result-code 2001]
%%                        [--olr TYPE:PCT:SEQ:VALIDITY] [--max-rate N] [--olr-always]
%%   Answers test_app Test-Request and base STR with --result-code (default 2001;
%%   a 3xxx code gives an answer-message with the E bit, RFC 6733 7.1.3),
%%   echoes Test-AVP, copies Proxy-Info (RFC 6733 6.2). Other requests get 3001.
%%   DOIC (RFC 7683): when a request carries OC-Supported-Features, the answer carries
%%   OC-Supported-Features{OC-Feature-Vector = 1 (OLR_DEFAULT_ALGO)} (7683 5.2.3), and,
%%   with --olr, an OC-OLR encoded by OTP's diameter_gen_doic_rfc7683:
%%     TYPE host|realm (OC-Report-Type 0|1), PCT OC-Reduction-Percentage,
%%     SEQ OC-Sequence-Number, VALIDITY OC-Validity-Duration (seconds).
%%   RFC 8581 / 8582 (OTP has no dictionary for them; see ?EXT_DOIC below):
%%     TYPE peer gives OC-Report-Type 2 (PEER_REPORT) with SourceID = own Origin-Host,
%%     and the answer's OC-Supported-Features adds OC_PEER_REPORT (0x10), SourceID and
%%     OC-Peer-Algo (RFC 8581 6.1.1);
%%     --max-rate N selects the rate algorithm (OLR_RATE_ALGORITHM 0x04, RFC 8582): the
%%     OLR carries OC-Maximum-Rate N instead of OC-Reduction-Percentage.
%%   --olr-always puts the OLR in every answer, even to requests without
%%   OC-Supported-Features (a non-conformant reporting node, for negative tests).
%%   Prints "LISTENING <addr> <port>" once the transport is up.
%%
%% CLIENT
%%   dpeer.escript client --connect HOST:PORT [--n 1000] [--concurrency 10] [--app test|base]
%%                        [--host erl-client.example.org] [--realm example.org]
%%                        [--dest-realm example.net] [--dest-host H] [--timeout 5000]
%%                        [--proxy-info] [--doic] [--doic-vector V] [--doic-source-id] [--watchdog MS] [--linger MS] [--verbose]
%%   Does CER/CEA, then sends N requests from C worker processes and prints:
%%     CEA origin_host=H origin_realm=R auth_app_ids=[..] vendor_specific_app_ids=[{V,A}..]
%%     RESULT app=A sent=N answered=K no_answer=E elapsed_s=S rate=R
%%     RC <code> <count>                  one line per Result-Code (experimental: RC exp:V:C)
%%     ERROR <reason> <count>             requests without an answer, by reason
%%     DOIC oc_supported_features=<k> oc_olr=<k>   answers that carried them
%%     OC-SUPPORTED-FEATURES feature_vector=F peer_algo=A source_id=S   the first one received
%%     OC-OLR sequence=S report_type=T reduction_percentage=P validity_duration=V
%%            max_rate=R source_id=S               the first one received (absent AVPs: -)
%%   --doic adds OC-Supported-Features{OC-Feature-Vector = 1} to each request;
%%   --doic-vector V sets the vector (e.g. 21 = loss + rate + peer report) and implies --doic.
%%   --doic-source-id adds SourceID = own Origin-Host to it (RFC 8581 6.1.1: with the
%%   OC_PEER_REPORT bit, the client then supports peer reports) and implies --doic.
%%   --proxy-info adds Proxy-Info to each request; an answer without it counts as
%%   RC proxy_info_missing:<code>.
%%   --watchdog MS sets the RFC 3539 watchdog timer Tw of the connection (OTP's
%%   watchdog_timer, at least 6000, default 30000; OTP adds +-2 s jitter); --linger MS keeps the connection up that long
%%   after the last answer (so DWR/DWA can be observed) before DPR/DPA.
%%   Exit code 0 only when all N answers are 2001 (and carry Proxy-Info if asked).
%%
%% test_app is freeDiameter's test application: vendor-specific application 16777215
%% (vendor 999999), Test-Request/Answer command 16777214 (R, P), Test-AVP 16777215
%% (vendor 999999, Integer32, V bit). base is the common application 0 with STR/STA.
-mode(compile).
-include_lib("diameter/include/diameter.hrl").

-export([peer_up/3, peer_down/3, pick_peer/4, prepare_request/3, prepare_retransmit/3,
         handle_answer/4, handle_error/4, handle_request/3]).

-define(TEST_APP, 16777215).
-define(TEST_VENDOR, 999999).

%% The test_app dictionary, compiled at startup with diameter_make. It inherits the
%% RFC 6733 base and RFC 7683 DOIC dictionaries, so OC-Supported-Features and OC-OLR
%% are encoded and decoded by OTP itself. Grammar order: fixed, required, optional.
%% With ?EXT_DOIC (a peer report or the rate algorithm, and always on the client) the
%% DOIC member AVPs are still inherited from OTP's dictionary, but OC-Supported-Features
%% and OC-OLR are redefined with the RFC 8581 / 8582 members.
%% Route-Record is allowed in answers because the freeDiameter relay adds it there.
-define(TEST_DIA, <<"
@id 16777215
@name dpeer_test_app
@prefix dpeer_ta
@vendor 999999 fd_test_app
@inherits diameter_gen_base_rfc6733
@inherits diameter_gen_doic_rfc7683

@messages
Test-Request ::= <Diameter Header: 16777214, REQ, PXY>
        < Session-Id >
        { Origin-Host }
        { Origin-Realm }
        { Destination-Realm }
        { Test-AVP }
        [ Destination-Host ]
        [ User-Name ]
        [ OC-Supported-Features ]
      * [ Proxy-Info ]
      * [ Route-Record ]
      * [ AVP ]

Test-Answer ::= <Diameter Header: 16777214, PXY>
        < Session-Id >
        { Origin-Host }
        { Origin-Realm }
        [ Result-Code ]
        [ Experimental-Result ]
        [ Test-AVP ]
        [ Error-Message ]
        [ Error-Reporting-Host ]
        [ OC-Supported-Features ]
        [ OC-OLR ]
      * [ Failed-AVP ]
      * [ Proxy-Info ]
      * [ Route-Record ]
      * [ AVP ]

@avp_types
Test-AVP 16777215 Integer32 V
">>).

%% RFC 8581 7.1-7.3 and RFC 8582 7.1-7.2 additions (replaces the full DOIC inherit).
%% OC-Report-Type is redefined because OTP's encoder rejects values its enum lacks
%% (PEER_REPORT = 2, RFC 8581 7.2.1).
-define(EXT_DOIC, <<"
@inherits diameter_gen_doic_rfc7683 OC-Feature-Vector OC-Sequence-Number OC-Validity-Duration OC-Reduction-Percentage

@avp_types
OC-Supported-Features 621 Grouped -
OC-OLR 623 Grouped -
OC-Report-Type 626 Enumerated -
OC-Peer-Algo 648 Unsigned64 -
SourceID 649 DiameterIdentity -
OC-Maximum-Rate 670 Unsigned32 -

@enum OC-Report-Type
HOST_REPORT 0
REALM_REPORT 1
PEER_REPORT 2

@grouped
OC-Supported-Features ::= < AVP Header: 621 >
        [ OC-Feature-Vector ]
        [ OC-Peer-Algo ]
        [ SourceID ]
      * [ AVP ]

OC-OLR ::= < AVP Header: 623 >
        < OC-Sequence-Number >
        < OC-Report-Type >
        [ OC-Reduction-Percentage ]
        [ OC-Validity-Duration ]
        [ SourceID ]
        [ OC-Maximum-Rate ]
      * [ AVP ]
">>).

main(["server" | Args]) -> server(parse(Args, defaults(server)));
main(["client" | Args]) -> client(parse(Args, defaults(client)));
main(_) -> usage("missing mode: server or client").

usage(Why) ->
    io:format(standard_error, "dpeer: ~s~n", [Why]),
    io:format(standard_error,
              "usage: dpeer.escript server [--addr A] [--port P] [--host H] [--realm R] [--result-code RC]~n"
              "                            [--olr host|realm|peer:PCT:SEQ:VALIDITY] [--max-rate N] [--olr-always]~n"
              "       dpeer.escript client --connect HOST:PORT [--n N] [--concurrency C] [--app test|base]~n"
              "                            [--host H] [--realm R] [--dest-realm R] [--dest-host H]~n"
              "                            [--timeout MS] [--proxy-info] [--doic] [--doic-vector V] [--watchdog MS] [--linger MS] [--verbose]~n", []),
    halt(2).

defaults(server) ->
    #{mode => server, addr => "127.0.0.1", port => 3871, host => "erl-server.example.net",
      realm => "example.net", result_code => 2001, olr => undefined, max_rate => undefined,
      olr_always => false};
defaults(client) ->
    #{mode => client, connect => undefined, n => 1000, concurrency => 10, app => test,
      host => "erl-client.example.org", realm => "example.org", dest_realm => "example.net",
      dest_host => undefined, timeout => 5000, proxy_info => false, doic => false, doic_vector => 1,
      doic_source_id => false, watchdog => 30000, linger => 0, verbose => false}.

parse([], M) -> M;
parse(["--addr", V | T], M) -> parse(T, M#{addr => V});
parse(["--port", V | T], M) -> parse(T, M#{port => int(V, "--port")});
parse(["--host", V | T], M) -> parse(T, M#{host => V});
parse(["--realm", V | T], M) -> parse(T, M#{realm => V});
parse(["--result-code", V | T], M) -> parse(T, M#{result_code => int(V, "--result-code")});
parse(["--olr", V | T], M) -> parse(T, M#{olr => olr_arg(V)});
parse(["--max-rate", V | T], M) -> parse(T, M#{max_rate => int(V, "--max-rate")});
parse(["--doic-vector", V | T], M) -> parse(T, M#{doic => true, doic_vector => int(V, "--doic-vector")});
parse(["--olr-always" | T], M) -> parse(T, M#{olr_always => true});
parse(["--connect", V | T], M) -> parse(T, M#{connect => hostport(V)});
parse(["--n", V | T], M) -> parse(T, M#{n => int(V, "--n")});
parse(["--concurrency", V | T], M) -> parse(T, M#{concurrency => int(V, "--concurrency")});
parse(["--app", "test" | T], M) -> parse(T, M#{app => test});
parse(["--app", "base" | T], M) -> parse(T, M#{app => base});
parse(["--dest-realm", V | T], M) -> parse(T, M#{dest_realm => V});
parse(["--dest-host", V | T], M) -> parse(T, M#{dest_host => V});
parse(["--timeout", V | T], M) -> parse(T, M#{timeout => int(V, "--timeout")});
parse(["--proxy-info" | T], M) -> parse(T, M#{proxy_info => true});
parse(["--doic" | T], M) -> parse(T, M#{doic => true});
parse(["--doic-source-id" | T], M) -> parse(T, M#{doic => true, doic_source_id => true});
parse(["--watchdog", V | T], M) ->
    %% OTP's diameter_watchdog accepts Tw >= 6000 ms only (RFC 3539 3.4.1: Tw >= 6 s).
    W = int(V, "--watchdog"),
    W >= 6000 orelse usage("--watchdog must be at least 6000 ms"),
    parse(T, M#{watchdog => W});
parse(["--linger", V | T], M) -> parse(T, M#{linger => int(V, "--linger")});
parse(["--verbose" | T], M) -> parse(T, M#{verbose => true});
parse([X | _], _) -> usage("unknown or incomplete argument " ++ X).

int(S, Opt) ->
    try list_to_integer(S) of
        N when N >= 0 -> N;
        _ -> usage(Opt ++ " wants a non-negative integer")
    catch error:badarg -> usage(Opt ++ " wants a non-negative integer, got " ++ S)
    end.

hostport(S) ->
    case string:split(S, ":", trailing) of
        [H, P] -> {string:trim(H, both, "[]"), int(P, "--connect port")};
        _ -> usage("--connect wants HOST:PORT, got " ++ S)
    end.

%% --olr TYPE:PCT:SEQ:VALIDITY
olr_arg(S) ->
    case string:split(S, ":", all) of
        [Type, Pct, Seq, Val] ->
            T = case Type of
                    "host" -> 0;
                    "realm" -> 1;
                    "peer" -> 2;
                    _ -> usage("--olr report type must be host, realm or peer")
                end,
            P = int(Pct, "--olr percentage"),
            P =< 100 orelse usage("--olr percentage must be 0..100"),
            #{type => T, pct => P, seq => int(Seq, "--olr sequence"),
              validity => int(Val, "--olr validity")};
        _ -> usage("--olr wants TYPE:PCT:SEQ:VALIDITY, e.g. host:50:1:30")
    end.

loopback(Str) ->
    case inet:parse_address(Str) of
        {ok, {127, _, _, _} = IP} -> IP;
        {ok, {0, 0, 0, 0, 0, 0, 0, 1} = IP} -> IP;
        _ when Str == "localhost" -> {127, 0, 0, 1};
        _ -> usage("refusing non-loopback address " ++ Str)
    end.

%% ---------------------------------------------------------------------------
setup(Opts) ->
    {ok, [Forms]} = diameter_make:codec(dictionary(Opts), [return, forms]),
    {ok, Mod, Bin} = compile:forms(Forms, [return_errors]),
    {module, Mod} = code:load_binary(Mod, "dpeer_test_app.erl", Bin),
    ok = diameter:start(),
    persistent_term:put(dpeer_opts, Opts),
    persistent_term:put(dpeer_count, counters:new(1, [write_concurrency])).

%% OTP's RFC 7683 dictionary, or the RFC 8581/8582 grammar when it is needed.
dictionary(O) ->
    Olr = maps:get(olr, O, undefined),
    Ext = maps:get(mode, O) == client
        orelse maps:get(max_rate, O, undefined) /= undefined
        orelse (is_map(Olr) andalso map_get(type, Olr) == 2),
    case Ext of
        false -> ?TEST_DIA;
        true ->
            [Head, Tail] = binary:split(?TEST_DIA, <<"@inherits diameter_gen_doic_rfc7683\n">>),
            [Msgs, Types] = binary:split(Tail, <<"@avp_types\n">>),
            [Inherit, ExtTypes] = binary:split(?EXT_DOIC, <<"@avp_types\n">>),
            [ExtTypeLines, Grouped] = binary:split(ExtTypes, <<"@grouped\n">>),
            <<Head/binary, Inherit/binary, Msgs/binary, "@avp_types\n", Types/binary,
              ExtTypeLines/binary, "@grouped\n", Grouped/binary>>
    end.

service(#{host := Host, realm := Realm}) ->
    [{'Origin-Host', Host},
     {'Origin-Realm', Realm},
     {'Vendor-Id', 0},
     {'Product-Name', "dpeer (Erlang/OTP diameter)"},
     {'Firmware-Revision', 1},
     {'Supported-Vendor-Id', [?TEST_VENDOR]},
     {'Auth-Application-Id', [0]},
     {'Vendor-Specific-Application-Id',
      [[{'Vendor-Id', ?TEST_VENDOR}, {'Auth-Application-Id', [?TEST_APP]}]]},
     {restrict_connections, false},
     {string_decode, false},
     {decode_format, map},
     {application, [{alias, test}, {dictionary, dpeer_test_app}, {module, ?MODULE}]},
     {application, [{alias, base}, {dictionary, diameter_gen_base_rfc6733}, {module, ?MODULE}]}].

server(#{addr := A, port := Port} = O) ->
    IP = loopback(A),
    setup(O),
    ok = diameter:start_service(dpeer_server, service(O)),
    true = diameter:subscribe(dpeer_server),
    {ok, _} = diameter:add_transport(dpeer_server,
                                     {listen, [{transport_module, diameter_tcp},
                                               {transport_config, [{reuseaddr, true}, {ip, IP},
                                                                   {port, Port}]}]}),
    io:format("LISTENING ~s ~p~n", [inet:ntoa(IP), Port]),
    erlang:send_after(10000, self(), stats),
    server_loop(0).

server_loop(Last) ->
    receive
        #diameter_event{info = {up, _, {_, Caps}, _, _}} ->
            io:format("PEER-UP ~s~n", [element(2, Caps#diameter_caps.origin_host)]),
            server_loop(Last);
        #diameter_event{info = {down, _, {_, Caps}, _}} ->
            io:format("PEER-DOWN ~s~n", [element(2, Caps#diameter_caps.origin_host)]),
            server_loop(Last);
        #diameter_event{info = {closed, _, Reason, _}} ->
            io:format("CLOSED ~p~n", [brief(Reason)]),
            server_loop(Last);
        #diameter_event{} ->
            server_loop(Last);
        stats ->
            N = counters:get(persistent_term:get(dpeer_count), 1),
            N /= Last andalso io:format("ANSWERED ~p~n", [N]),
            erlang:send_after(10000, self(), stats),
            server_loop(N)
    end.

client(#{connect := undefined}) -> usage("client needs --connect HOST:PORT");
client(#{connect := {RH, RP}, n := N, concurrency := C0, timeout := Tmo, app := App} = O) ->
    RIP = loopback(RH),
    setup(O),
    ok = diameter:start_service(dpeer_client, service(O)),
    true = diameter:subscribe(dpeer_client),
    {ok, Ref} = diameter:add_transport(dpeer_client,
                                       {connect, [{transport_module, diameter_tcp},
                                                  {transport_config, [{raddr, RIP}, {rport, RP}]},
                                                  {connect_timer, 3000},
                                                  {watchdog_timer, maps:get(watchdog, O)}]}),
    case wait_up(Ref, erlang:monotonic_time(millisecond) + 10000) of
        {ok, Caps} ->
            io:format("CEA origin_host=~s origin_realm=~s auth_app_ids=~w vendor_specific_app_ids=~w~n",
                      [remote(Caps#diameter_caps.origin_host),
                       remote(Caps#diameter_caps.origin_realm),
                       remote(Caps#diameter_caps.auth_application_id),
                       [{element(2, V), element(3, V)}
                        || V <- remote(Caps#diameter_caps.vendor_specific_application_id)]]);
        {error, Why} ->
            io:format("CONNECT-FAILED ~p~n", [Why]),
            halt(3)
    end,
    ets:new(dpeer_doic, [named_table, public, set]),
    C = max(1, min(C0, max(N, 1))),
    Self = self(),
    T0 = erlang:monotonic_time(microsecond),
    Ws = [spawn_link(fun() -> Self ! {done, self(), worker(App, share(N, C, I), Tmo, O, #{})} end)
          || I <- lists:seq(1, C)],
    Res = lists:foldl(fun(W, Acc) -> receive {done, W, R} -> merge(R, Acc) end end, #{}, Ws),
    Secs = max(1, erlang:monotonic_time(microsecond) - T0) / 1.0e6,
    Answered = lists:sum([V || {{rc, _}, V} <- maps:to_list(Res)]),
    io:format("RESULT app=~s sent=~p answered=~p no_answer=~p elapsed_s=~.3f rate=~p~n",
              [App, N, Answered, N - Answered, Secs, round(Answered / Secs)]),
    [io:format("RC ~s ~p~n", [rc_text(RC), V]) || {{rc, RC}, V} <- lists:sort(maps:to_list(Res))],
    [io:format("ERROR ~0p ~p~n", [E, V]) || {{err, E}, V} <- lists:sort(maps:to_list(Res))],
    Doic = fun(K) -> case ets:lookup(dpeer_doic, K) of [{K, Cnt, _}] -> Cnt; [] -> 0 end end,
    io:format("DOIC oc_supported_features=~p oc_olr=~p~n",
              [Doic('OC-Supported-Features'), Doic('OC-OLR')]),
    [io:format("~s~n", [doic_line(K, First)])
     || K <- ['OC-Supported-Features', 'OC-OLR'], {_, _, First} <- ets:lookup(dpeer_doic, K)],
    timer:sleep(maps:get(linger, O)),
    diameter:remove_transport(dpeer_client, Ref),
    diameter:stop_service(dpeer_client),
    halt(case maps:get({rc, 2001}, Res, 0) of N -> 0; _ -> 1 end).

%% One line for the first OC-Supported-Features / OC-OLR an answer carried.
doic_line(K, [V | _]) -> doic_line(K, V);
doic_line('OC-Supported-Features', M) when is_map(M) ->
    io_lib:format("OC-SUPPORTED-FEATURES feature_vector=~s peer_algo=~s source_id=~s",
                  [field(M, F) || F <- ['OC-Feature-Vector', 'OC-Peer-Algo', 'SourceID']]);
doic_line('OC-OLR', M) when is_map(M) ->
    io_lib:format("OC-OLR sequence=~s report_type=~s reduction_percentage=~s validity_duration=~s"
                  " max_rate=~s source_id=~s",
                  [field(M, F) || F <- ['OC-Sequence-Number', 'OC-Report-Type',
                                        'OC-Reduction-Percentage', 'OC-Validity-Duration',
                                        'OC-Maximum-Rate', 'SourceID']]);
doic_line(K, V) -> io_lib:format("~s ~0lp", [K, V]).

field(M, F) ->
    case maps:get(F, M, []) of
        [] -> "-";
        [V | _] when is_integer(V) -> integer_to_list(V);
        [V | _] when is_binary(V) -> binary_to_list(V);
        V when is_integer(V) -> integer_to_list(V);
        V when is_binary(V) -> binary_to_list(V);
        V -> io_lib:format("~0lp", [V])
    end.

rc_text({experimental, V, C}) -> io_lib:format("exp:~p:~p", [V, C]);
rc_text({proxy_info_missing, RC}) -> "proxy_info_missing:" ++ rc_text(RC);
rc_text(RC) when is_integer(RC) -> integer_to_list(RC);
rc_text(RC) -> io_lib:format("~0p", [RC]).

remote({_Local, Remote}) -> Remote;
remote(X) -> X.

share(N, C, I) -> N div C + (case I =< N rem C of true -> 1; false -> 0 end).

merge(A, B) -> maps:fold(fun(K, V, Acc) -> maps:update_with(K, fun(X) -> X + V end, V, Acc) end, B, A).

wait_up(Ref, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        #diameter_event{info = {up, Ref, {_, Caps}, _, _}} -> {ok, Caps};
        #diameter_event{info = {up, Ref, {_, Caps}, _}} -> {ok, Caps};
        #diameter_event{info = {closed, Ref, Reason, _}} -> {error, {closed, brief(Reason)}};
        #diameter_event{} -> wait_up(Ref, Deadline)
    after Left -> {error, timeout}
    end.

brief({Cmd, Result, _Caps, _Pkt}) when Cmd == 'CEA'; Cmd == 'CER' -> {Cmd, Result};
brief(X) -> X.

worker(_App, 0, _Tmo, _O, Acc) -> Acc;
worker(App, K, Tmo, O, Acc) ->
    Key = case diameter:call(dpeer_client, App, request(App, O), [{timeout, Tmo}]) of
              {ok, RC} -> {rc, RC};
              {error, E} -> {err, E};
              Other -> {err, Other}
          end,
    (Key /= {rc, 2001}) andalso maps:get(verbose, O) andalso io:format("ANSWER ~0p~n", [Key]),
    worker(App, K - 1, Tmo, O, maps:update_with(Key, fun(X) -> X + 1 end, 1, Acc)).

request(test, #{host := H, realm := R, dest_realm := DR} = O) ->
    ['Test-Request',
     {'Session-Id', diameter:session_id(H)},
     {'Origin-Host', H}, {'Origin-Realm', R}, {'Destination-Realm', DR},
     {'Test-AVP', rand:uniform(1 bsl 30)}]
        ++ common_opts(O);
request(base, #{host := H, realm := R, dest_realm := DR} = O) ->
    ['STR',
     {'Session-Id', diameter:session_id(H)},
     {'Origin-Host', H}, {'Origin-Realm', R}, {'Destination-Realm', DR},
     {'Auth-Application-Id', 0}, {'Termination-Cause', 1}]
        ++ common_opts(O).

%% Destination-Host, Proxy-Info and (test_app only, STR has no room for it in the
%% base grammar) OC-Supported-Features.
common_opts(#{host := H, dest_host := DH, proxy_info := PI, doic := Doic, app := App,
              doic_vector := Vec} = O) ->
    Src = [{'SourceID', [H]} || maps:get(doic_source_id, O, false)],
    [{'Destination-Host', [DH]} || DH /= undefined]
        ++ [{'Proxy-Info', [#{'Proxy-Host' => H, 'Proxy-State' => <<"dpeer-state">>}]} || PI]
        ++ [{'OC-Supported-Features', [maps:from_list([{'OC-Feature-Vector', [Vec]} | Src])]}
            || Doic, App == test].

%% ---------------------------------------------------------------------------
%% diameter_app callbacks
peer_up(_Svc, _Peer, S) -> S.
peer_down(_Svc, _Peer, S) -> S.
pick_peer([Peer | _], _Remote, _Svc, _S) -> {ok, Peer};
pick_peer([], _Remote, _Svc, _S) -> false.
prepare_request(Pkt, _Svc, _Peer) -> {send, Pkt}.
prepare_retransmit(Pkt, _Svc, _Peer) -> {send, Pkt}.

handle_answer(#diameter_packet{msg = [_Name | Map]}, Req, _Svc, _Peer) when is_map(Map) ->
    note_doic(Map),
    RC = result_code(Map),
    case {sent_proxy_info(Req), maps:get('Proxy-Info', Map, [])} of
        {true, []} -> {ok, {proxy_info_missing, RC}};
        _ -> {ok, RC}
    end;
handle_answer(#diameter_packet{msg = Msg, errors = Errs}, _Req, _Svc, _Peer) ->
    {error, {undecoded, Msg, Errs}}.

handle_error(Reason, _Req, _Svc, _Peer) -> {error, Reason}.

%% Counts the DOIC AVPs of an answer and keeps the first value of each.
note_doic(Map) ->
    [case maps:get(K, Map, []) of
         [] -> ok;
         undefined -> ok;
         V -> ets:insert_new(dpeer_doic, {K, 0, V}), ets:update_counter(dpeer_doic, K, {2, 1})
     end || K <- ['OC-Supported-Features', 'OC-OLR']],
    ok.

sent_proxy_info(#diameter_packet{msg = [_ | Avps]}) when is_list(Avps) ->
    lists:keymember('Proxy-Info', 1, Avps);
sent_proxy_info(_) -> false.

result_code(#{'Result-Code' := RC}) when is_integer(RC) -> RC;
result_code(#{'Result-Code' := [RC]}) -> RC;
result_code(#{'Experimental-Result' := ER}) ->
    E = case ER of [X] -> X; X -> X end,
    {experimental, maps:get('Vendor-Id', E, undefined), maps:get('Experimental-Result-Code', E, undefined)};
result_code(_) -> no_result_code.

%% RFC 6733 7.1.3: a protocol error (3xxx) is answered with the E bit set and the
%% answer-message grammar; OTP builds that for {answer_message, RC}.
handle_request(Pkt, Svc, Peer) ->
    case rc() of
        RC when RC >= 3000, RC < 4000 ->
            counters:add(persistent_term:get(dpeer_count), 1, 1),
            {answer_message, RC};
        _ ->
            handle(Pkt, Svc, Peer)
    end.

handle(#diameter_packet{msg = ['Test-Request' | Req]}, _Svc, {_, Caps}) ->
    counters:add(persistent_term:get(dpeer_count), 1, 1),
    {OH, OR} = local_id(Caps),
    {reply, ['Test-Answer', {'Session-Id', maps:get('Session-Id', Req)},
             {'Origin-Host', OH}, {'Origin-Realm', OR},
             {'Result-Code', rc()},
             {'Test-AVP', maps:get('Test-AVP', Req)}]
             ++ doic(Req) ++ proxy_info(Req)};
handle(#diameter_packet{msg = ['STR' | Req]}, _Svc, {_, Caps}) ->
    counters:add(persistent_term:get(dpeer_count), 1, 1),
    {OH, OR} = local_id(Caps),
    {reply, ['STA', {'Session-Id', maps:get('Session-Id', Req)}, {'Result-Code', rc()},
             {'Origin-Host', OH}, {'Origin-Realm', OR}]
             ++ proxy_info(Req)};
handle(_Pkt, _Svc, _Peer) ->
    {answer_message, 3001}.  %% DIAMETER_COMMAND_UNSUPPORTED

rc() -> maps:get(result_code, persistent_term:get(dpeer_opts)).

%% RFC 7683 5.2.3: a reporting node answers a request that carried
%% OC-Supported-Features with its own OC-Supported-Features (the selected
%% algorithm) and may add an OC-OLR.
doic(Req) ->
    O = persistent_term:get(dpeer_opts),
    Supported = maps:get('OC-Supported-Features', Req, []) /= [],
    Olr = maps:get(olr, O),
    Rate = maps:get(max_rate, O),
    Peer = is_map(Olr) andalso map_get(type, Olr) == 2,
    %% The selected algorithm: rate (0x04) with --max-rate, else loss (0x01).
    Algo = case Rate of undefined -> 1; _ -> 4 end,
    Me = maps:get(host, O),
    PeerFeat = case Peer of
                   true -> #{'OC-Peer-Algo' => [Algo], 'SourceID' => [Me]};
                   false -> #{}
               end,
    Vector = Algo bor (case Peer of true -> 16; false -> 0 end),
    Feat = [{'OC-Supported-Features', [PeerFeat#{'OC-Feature-Vector' => [Vector]}]} || Supported],
    Report = case Olr of
                 #{type := T, pct := P, seq := S, validity := V} when Supported; map_get(olr_always, O) ->
                     Base = #{'OC-Sequence-Number' => S, 'OC-Report-Type' => T,
                              'OC-Validity-Duration' => [V]},
                     WithValue = case Rate of
                                     undefined -> Base#{'OC-Reduction-Percentage' => [P]};
                                     R -> Base#{'OC-Maximum-Rate' => [R]}
                                 end,
                     [{'OC-OLR', [case Peer of
                                      true -> WithValue#{'SourceID' => [Me]};
                                      false -> WithValue
                                  end]}];
                 _ -> []
             end,
    Feat ++ Report.

%% RFC 6733 6.2: the Proxy-Info AVPs of a request are copied, in order, into its answer.
proxy_info(Req) ->
    case maps:get('Proxy-Info', Req, []) of
        [] -> [];
        PIs -> [{'Proxy-Info', PIs}]
    end.

local_id(#diameter_caps{origin_host = {OH, _}, origin_realm = {OR, _}}) -> {OH, OR}.
