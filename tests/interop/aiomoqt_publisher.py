#!/usr/bin/env python3
"""aiomoqt-based MoQT publisher for kvcast relay interop tests.

Connects to a relay as a client (raw QUIC, draft-14 by default), sends
PUBLISH_NAMESPACE for --namespace, then answers the relay's SUBSCRIBE and
FETCH requests for --track with deterministic objects:

  groups 0..G-1, objects 0..N-1 in each group, every payload
  payloads.payload(seed, group, object, object_size)  (see payloads.py).

SUBSCRIBE (draft-14 semantics: a subscription delivers objects published
after it, FETCH delivers the past):
  * until the track is complete, every SUBSCRIBE gets SUBSCRIBE_OK
    (Content Exists 0, Track Alias chosen by aiomoqt: 0, 1, ... per
    session) and then, once its Forward State is 1, every object of its
    filter window, one subgroup stream per group (subgroup 0, header type
    --subgroup-type, publisher priority --priority), FIN after the last
    object (after an END_OF_GROUP status object with --end-of-group),
    then PUBLISH_DONE (TRACK_ENDED, or SUBSCRIPTION_ENDED when an
    AbsoluteRange ended early) with the exact Stream Count. The first
    subscription that reaches the last object completes the track.
  * once the track is complete (or from the start with --prepublished),
    a SUBSCRIBE gets SUBSCRIBE_OK (Content Exists 1, Largest = (G-1, N-1))
    and, as nothing new will be published, PUBLISH_DONE TRACK_ENDED with
    Stream Count 0 -- unless --replay, which serves every SUBSCRIBE as if
    the track had never been published.
  * filters: LargestObject / NextGroupStart start at (0,0) while nothing
    is published; AbsoluteStart / AbsoluteRange are honoured (AbsoluteRange
    End Group inclusive). SUBSCRIBE_UPDATE can set Forward and narrow the
    End Group; UNSUBSCRIBE resets the open stream and stops.
FETCH:
  * standalone FETCH of a complete (or --prepublished) track is served
    from the payload function, End Location per draft-14 section 9.17;
    before that: FETCH_ERROR INVALID_RANGE.
  * joining FETCH (relative / absolute) against a SUBSCRIBE of the same
    session uses the Largest Location that SUBSCRIBE_OK reported; with
    Content Exists 0 it is FETCH_ERROR INVALID_RANGE (draft-14 9.16.2).

Stops at --timeout (exit 0 unless --exit-after-served was not reached),
on SIGINT/SIGTERM (exit 0), or after --exit-after-served subscriptions
were served to the end (exit 0); sends PUBLISH_NAMESPACE_DONE before
closing. Prints one JSON summary line on stdout; logs on stderr.

Exit codes: 0 ok, 2 usage, 3 timeout before --exit-after-served was
reached, 4 connect/SETUP failed or the relay closed the session,
5 PUBLISH_NAMESPACE refused, 6 other error.
"""
import argparse
import asyncio
import os
import sys
import time

sys.dont_write_bytecode = True   # keep tests/interop free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import interop_common as ic  # noqa: E402
from payloads import payload  # noqa: E402

EXT_TYPE = 0x41   # odd: length-prefixed bytes, value b"kvcast:{g}:{o}"


def parse_args():
    ap = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See tests/interop/README.md.")
    ic.add_common_args(ap)
    ap.add_argument("--subgroup-type", type=lambda s: int(s, 0), default=0x14,
                    help="SUBGROUP_HEADER type 0x10-0x15 or 0x18-0x1D (default "
                         "0x14: explicit subgroup id, no extensions). Bit 0 = "
                         "extensions field present, bits 1-2 = subgroup id "
                         "mode (0 zero, 1 first object id, 2 explicit), bit 3 "
                         "= stream contains the end of the group")
    ap.add_argument("--end-of-group", action="store_true",
                    help="close each group with an END_OF_GROUP status object "
                         "(Object ID N) before the FIN")
    ap.add_argument("--with-extension", action="store_true",
                    help=f"give every object the extension 0x{EXT_TYPE:x} = "
                         "b'kvcast:{group}:{object}' (forces an extensions-"
                         "present header type)")
    ap.add_argument("--priority", type=int, default=128,
                    help="publisher priority in the subgroup header (default 128)")
    ap.add_argument("--object-interval-ms", type=float, default=0.0,
                    help="pause between objects (default 0)")
    ap.add_argument("--prepublished", action="store_true",
                    help="the whole track counts as published before any "
                         "SUBSCRIBE: SUBSCRIBEs get no objects, FETCH serves all")
    ap.add_argument("--replay", action="store_true",
                    help="serve every SUBSCRIBE as if nothing had been published")
    ap.add_argument("--exit-after-served", type=int, default=0, metavar="K",
                    help="exit 0 once K subscriptions were served to their "
                         "PUBLISH_DONE (default 0: run until --timeout or a signal)")
    ap.add_argument("--ready-file", metavar="PATH",
                    help="write this file once PUBLISH_NAMESPACE_OK arrived")
    args = ap.parse_args()
    ic.check_counts(ap, args)
    t = args.subgroup_type
    if not (0x10 <= t <= 0x1D) or ((t >> 1) & 3) == 3:
        ap.error("--subgroup-type must be 0x10-0x15 or 0x18-0x1D")
    if args.with_extension:
        args.subgroup_type |= 0x01
    if args.object_size > 4 * 1024 * 1024 - 4096:
        ap.error("--object-size: aiopquic's per-stream send ring is 4 MiB; "
                 "keep objects below 4 MiB - 4 KiB")
    if not 0 <= args.priority <= 255:
        ap.error("--priority is 0..255")
    return args


class SubState:
    def __init__(self, request_id, alias, start, end_group, forward,
                 reported_largest):
        self.request_id = request_id
        self.alias = alias
        self.start = start                 # (group, object)
        self.end_group = end_group         # inclusive, or None
        self.forward = asyncio.Event()
        if forward:
            self.forward.set()
        self.reported_largest = reported_largest
        self.cancelled = False
        self.stream_id = None
        self.streams = 0


class Publisher:
    def __init__(self, args):
        self.a = args
        self.G, self.N = args.groups, args.objects_per_group
        self.complete = args.prepublished
        self.subs = {}                     # (id(session), request_id) -> SubState
        self.served_event = asyncio.Event()
        self.announced = False
        self.stats = dict(subscribes_received=0, subscribes_refused=0,
                          subscriptions_served=0, subscriptions_cancelled=0,
                          fetches_received=0, fetches_served=0,
                          fetches_refused=0, streams_opened=0,
                          objects_sent=0, payload_bytes_sent=0,
                          fetch_objects_sent=0)
        self.errors = []

    # -- helpers ---------------------------------------------------------
    def largest(self):
        return (self.G - 1, self.N - 1)

    def matches(self, ns, name) -> bool:
        return (tuple(bytes(f) for f in ns) == self.a.ns_tuple
                and bytes(name) == self.a.track_bytes)

    def exts(self, g, o):
        if not self.a.with_extension:
            return None
        return {EXT_TYPE: f"kvcast:{g}:{o}".encode()}

    def _served(self):
        self.stats["subscriptions_served"] += 1
        k = self.a.exit_after_served
        if k and self.stats["subscriptions_served"] >= k:
            self.served_event.set()

    # -- SUBSCRIBE ---------------------------------------------------------
    async def on_subscribe(self, session, msg):
        from aiomoqt.types import (FilterType, GroupOrder, RequestErrorCode,
                                   SubscribeDoneCode)
        self.stats["subscribes_received"] += 1
        rid = msg.request_id
        ic.log(f"SUBSCRIBE rid={rid} ns={ic.ns_display(msg.track_namespace)} "
               f"track={bytes(msg.track_name)!r} filter={msg.filter_type} "
               f"start=({msg.start_group},{msg.start_object}) "
               f"end_group={msg.end_group} forward={msg.forward}")
        if not self.matches(msg.track_namespace, msg.track_name):
            self.stats["subscribes_refused"] += 1
            session.subscribe_error(rid, error_code=RequestErrorCode.DOES_NOT_EXIST,
                                    reason="track does not exist")
            return
        published = self.complete and not self.a.replay
        largest = self.largest() if published else None
        ft = msg.filter_type
        end_group = None
        if ft == FilterType.LATEST_OBJECT:
            start = (0, 0) if largest is None else (largest[0], largest[1] + 1)
        elif ft == FilterType.NEXT_GROUP_START:
            start = (0, 0) if largest is None else (largest[0] + 1, 0)
        elif ft in (FilterType.ABSOLUTE_START, FilterType.ABSOLUTE_RANGE):
            start = (msg.start_group or 0, msg.start_object or 0)
            if ft == FilterType.ABSOLUTE_RANGE:
                end_group = msg.end_group or 0
                if end_group < start[0]:
                    self.stats["subscribes_refused"] += 1
                    session.subscribe_error(
                        rid, error_code=RequestErrorCode.INVALID_RANGE,
                        reason="end group before start group")
                    return
        else:
            self.stats["subscribes_refused"] += 1
            session.subscribe_error(rid, error_code=RequestErrorCode.NOT_SUPPORTED,
                                    reason=f"filter type {ft}")
            return
        kw = {}
        if largest is not None:
            kw = dict(content_exists=1, largest_group_id=largest[0],
                      largest_object_id=largest[1])
        ok = session.subscribe_ok(request_msg=msg,
                                  group_order=GroupOrder.ASCENDING, **kw)
        forward = True if msg.forward is None else bool(msg.forward)
        st = SubState(rid, ok.track_alias, start, end_group, forward, largest)
        self.subs[(id(session), rid)] = st
        session.register_request_cancel_handler(
            rid, lambda _rid, st=st: self._cancel(session, st))
        ic.log(f"SUBSCRIBE_OK rid={rid} alias={ok.track_alias} "
               f"content_exists={int(largest is not None)} window start={start} "
               f"end_group={end_group}")
        if published:
            session.subscribe_done(rid, status_code=SubscribeDoneCode.TRACK_ENDED,
                                   stream_count=0, reason="track ended")
            self._served()
            return
        asyncio.ensure_future(self._send_subscription(session, st))

    def _cancel(self, session, st):
        ic.log(f"subscription rid={st.request_id} cancelled by the relay")
        st.cancelled = True
        self.stats["subscriptions_cancelled"] += 1
        if st.stream_id is not None:
            from aiomoqt.types import StreamResetCode
            session.stream_reset(st.stream_id, StreamResetCode.CANCELLED)
            st.stream_id = None
        st.forward.set()   # wake a paused sender so it can stop

    async def on_subscribe_update(self, session, msg):
        st = self.subs.get((id(session), msg.subscription_request_id))
        ic.log(f"SUBSCRIBE_UPDATE rid={msg.request_id} for "
               f"{msg.subscription_request_id} forward={msg.forward} "
               f"end_group+1={msg.end_group}")
        if st is None:
            return
        if msg.end_group:
            eg = msg.end_group - 1
            st.end_group = eg if st.end_group is None else min(st.end_group, eg)
        if msg.forward:
            st.forward.set()
        elif msg.forward == 0:
            st.forward.clear()

    async def _send_subscription(self, session, st):
        from aiomoqt.messages.data import (SUBGROUP_ID_EXPLICIT,
                                           SUBGROUP_ID_FIRST_OBJ)
        from aiomoqt.types import ObjectStatus, SubscribeDoneCode
        a = self.a
        t = a.subgroup_type
        ext_present = bool(t & 0x01)
        mode = (t >> 1) & 0x03
        eog_flag = bool(t & 0x08)
        try:
            last_group = self.G - 1 if st.end_group is None else min(self.G - 1, st.end_group)
            for g in range(st.start[0], last_group + 1):
                first = st.start[1] if g == st.start[0] else 0
                if first >= self.N:
                    continue
                await st.forward.wait()
                if st.cancelled or session._close_err is not None:
                    return
                if st.end_group is not None and g > st.end_group:
                    break
                m = mode
                if m == SUBGROUP_ID_FIRST_OBJ and first != 0:
                    m = SUBGROUP_ID_EXPLICIT   # subgroup id stays 0
                header = session.subgroup_header(
                    track_alias=st.alias, group_id=g, subgroup_id=0,
                    publisher_priority=a.priority,
                    extensions_present=ext_present, end_of_group=eog_flag,
                    subgroup_id_mode=m)
                sid = await session.open_uni_stream()
                st.stream_id = sid
                st.streams += 1
                self.stats["streams_opened"] += 1
                await session.stream_write_drain(sid, header.serialize().data)
                for o in range(first, self.N):
                    if o > first and a.object_interval_ms > 0:
                        await asyncio.sleep(a.object_interval_ms / 1000)
                    if st.cancelled:
                        return
                    data = payload(a.seed, g, o, a.object_size)
                    buf = header.next_object_bytes(
                        data, self.exts(g, o) if ext_present else None,
                        ObjectStatus.NORMAL, o)
                    await session.stream_write_drain(sid, buf)
                    self.stats["objects_sent"] += 1
                    self.stats["payload_bytes_sent"] += len(data)
                if st.cancelled:
                    return
                if a.end_of_group:
                    buf = header.next_object_bytes(
                        b"", {} if ext_present else None,
                        ObjectStatus.END_OF_GROUP, self.N)
                    session.stream_write(sid, buf, end_stream=True)
                else:
                    session.stream_fin(sid)
                st.stream_id = None
            if st.cancelled:
                return
            if last_group == self.G - 1 and st.start <= (self.G - 1, self.N - 1):
                self.complete = True
                status = SubscribeDoneCode.TRACK_ENDED
            else:
                status = (SubscribeDoneCode.TRACK_ENDED if last_group == self.G - 1
                          else SubscribeDoneCode.SUBSCRIPTION_ENDED)
            session.subscribe_done(st.request_id, status_code=status,
                                   stream_count=st.streams,
                                   reason="track ended")
            ic.log(f"PUBLISH_DONE rid={st.request_id} status={int(status)} "
                   f"streams={st.streams}")
            self._served()
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"sending subscription {st.request_id}: "
                               f"{type(e).__name__}: {e}")
            ic.log(self.errors[-1])

    # -- FETCH -------------------------------------------------------------
    async def on_fetch(self, session, msg):
        from aiomoqt.messages import FetchObject
        from aiomoqt.types import FetchType, GroupOrder, RequestErrorCode
        self.stats["fetches_received"] += 1
        rid = msg.request_id
        a = self.a

        def refuse(code, reason):
            self.stats["fetches_refused"] += 1
            ic.log(f"FETCH rid={rid} refused: {reason}")
            session.fetch_error(request_id=rid, error_code=code, reason=reason)

        largest = self.largest()
        if msg.fetch_type in (FetchType.RELATIVE_JOINING, FetchType.ABSOLUTE_JOINING):
            ic.log(f"FETCH rid={rid} joining type={msg.fetch_type} "
                   f"sub={msg.joining_request_id} start={msg.joining_start}")
            st = self.subs.get((id(session), msg.joining_request_id))
            if st is None:
                return refuse(RequestErrorCode.INVALID_JOINING_REQUEST_ID,
                              "no such subscription")
            anchor = st.reported_largest
            if anchor is None:
                return refuse(RequestErrorCode.INVALID_RANGE,
                              "SUBSCRIBE_OK had Content Exists 0")
            js = msg.joining_start or 0
            if msg.fetch_type == FetchType.RELATIVE_JOINING:
                start = (max(0, anchor[0] - js), 0)
            else:
                start = (js, 0)
            last = anchor
            end_loc = (anchor[0], anchor[1] + 1)
        else:
            ic.log(f"FETCH rid={rid} standalone ns={ic.ns_display(msg.namespace or ())} "
                   f"track={bytes(msg.track_name or b'')!r} "
                   f"start=({msg.start_group},{msg.start_object}) "
                   f"end=({msg.end_group},{msg.end_object})")
            if not self.matches(msg.namespace or (), msg.track_name or b""):
                return refuse(RequestErrorCode.DOES_NOT_EXIST, "track does not exist")
            if not self.complete:
                return refuse(RequestErrorCode.INVALID_RANGE,
                              "track has not published any objects yet")
            start = (msg.start_group or 0, msg.start_object or 0)
            eg, eo = msg.end_group or 0, msg.end_object or 0
            req_last = (eg, 1 << 62) if eo == 0 else (eg, eo - 1)
            if start > largest:
                return refuse(RequestErrorCode.INVALID_RANGE,
                              "start after the Largest Object")
            if req_last < start:
                return refuse(RequestErrorCode.INVALID_RANGE, "end before start")
            # draft-14 9.17 End Location: End Object 0 covering the whole
            # (complete) group -> {End.Group, 0}; beyond the Largest Object
            # -> {Largest.Group, Largest.Object + 1}; else the request's.
            if eo == 0 and eg <= largest[0]:
                last, end_loc = (eg, self.N - 1), (eg, 0)
            elif req_last > largest:
                last, end_loc = largest, (largest[0], largest[1] + 1)
            else:
                last, end_loc = req_last, (eg, eo)
        if start > last:
            return refuse(RequestErrorCode.INVALID_RANGE, "empty range")
        descending = msg.group_order == GroupOrder.DESCENDING
        order = GroupOrder.DESCENDING if descending else GroupOrder.ASCENDING
        session.fetch_ok(request_id=rid,
                         end_of_track=int(self.complete and last == largest),
                         largest_group_id=end_loc[0], largest_object_id=end_loc[1],
                         group_order=int(order))
        groups = range(start[0], min(last[0], self.G - 1) + 1)
        if descending:
            groups = reversed(groups)

        def objects():
            for g in groups:
                o0 = start[1] if g == start[0] else 0
                o1 = last[1] if g == last[0] else self.N - 1
                for o in range(o0, min(o1, self.N - 1) + 1):
                    self.stats["fetch_objects_sent"] += 1
                    yield FetchObject(group_id=g, subgroup_id=0, object_id=o,
                                      publisher_priority=a.priority,
                                      extensions=self.exts(g, o),
                                      payload=payload(a.seed, g, o, a.object_size))
        ic.log(f"FETCH_OK rid={rid} {start}..{last} end_location={end_loc}")
        try:
            await session.serve_fetch(rid, objects(), group_order=int(order))
            self.stats["fetches_served"] += 1
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"serving fetch {rid}: {type(e).__name__}: {e}")


async def run(args, pub: Publisher, stop: asyncio.Event, state: dict):
    from aiomoqt.types import MOQTMessageType, MOQTRequestError
    client = ic.make_client(args)
    client.register_handler(MOQTMessageType.SUBSCRIBE, pub.on_subscribe)
    client.register_handler(MOQTMessageType.SUBSCRIBE_UPDATE, pub.on_subscribe_update)
    client.register_handler(MOQTMessageType.FETCH, pub.on_fetch)
    loop = asyncio.get_running_loop()
    deadline = state["t0"] + args.timeout
    state["phase"] = "connect"
    async with client.connect() as session:
        await session.client_session_init(timeout=max(1, int(args.connect_timeout)))
        state["phase"] = "publish_namespace"
        try:
            await session.publish_namespace(namespace=args.ns_tuple,
                                            parameters=ic.auth_params(args),
                                            wait_response=True)
        except MOQTRequestError as e:
            state["exit"] = ic.EXIT_REFUSED
            state["error"] = f"PUBLISH_NAMESPACE refused: code={e.error_code} {e.reason}"
            return
        pub.announced = True
        ic.log(f"PUBLISH_NAMESPACE_OK for {ic.ns_display(args.ns_tuple)}")
        if args.ready_file:
            with open(args.ready_file, "w") as f:
                f.write("ready\n")
        state["phase"] = "serving"
        waits = {asyncio.ensure_future(stop.wait()): "signal",
                 asyncio.ensure_future(pub.served_event.wait()): "served",
                 asyncio.ensure_future(session.async_closed()): "closed"}
        done, pending = await asyncio.wait(
            waits, timeout=max(0.0, deadline - loop.time()),
            return_when=asyncio.FIRST_COMPLETED)
        for f in pending:
            f.cancel()
        why = waits[next(iter(done))] if done else "timeout"
        state["stopped_by"] = why
        if why == "closed":
            state["exit"] = ic.EXIT_CONNECT
            state["error"] = f"session closed by peer: {getattr(session, '_close_err', None)}"
            return
        if why == "timeout" and args.exit_after_served:
            state["exit"] = ic.EXIT_TIMEOUT
            state["error"] = (f"served {pub.stats['subscriptions_served']} of "
                              f"{args.exit_after_served} subscriptions")
        else:
            state["exit"] = ic.EXIT_OK
        try:
            session.publish_namespace_done(namespace=args.ns_tuple)
        except Exception:  # noqa: BLE001
            pass
        await asyncio.sleep(0.2)
        session.close()


def main():
    args = parse_args()
    ic.setup_logging(args.debug)
    state = {"exit": ic.EXIT_ERROR, "error": None, "phase": "start",
             "stopped_by": None}

    async def amain():
        loop = asyncio.get_running_loop()
        state["t0"] = loop.time()
        stop = asyncio.Event()
        ic.install_stop_signals(loop, stop)
        pub = Publisher(args)
        state["pub"] = pub
        try:
            why = await ic.supervise(run(args, pub, stop, state), state,
                                     args.connect_timeout, args.timeout + 5)
            if why == "connect_timeout":
                state["exit"] = ic.EXIT_CONNECT
                state["error"] = f"no SERVER_SETUP within {args.connect_timeout}s"
            elif why == "timeout":
                state["exit"] = (ic.EXIT_TIMEOUT if args.exit_after_served
                                 or not pub.announced else ic.EXIT_OK)
                state["error"] = f"hard timeout in phase {state['phase']}"
        except Exception as e:  # noqa: BLE001
            connect_phase = state["phase"] == "connect"
            state["exit"] = ic.EXIT_CONNECT if connect_phase else ic.EXIT_ERROR
            state["error"] = f"{state['phase']}: {type(e).__name__}: {e}"
        if pub.errors and state["exit"] == ic.EXIT_OK:
            state["exit"] = ic.EXIT_ERROR
            state["error"] = pub.errors[0]
        state["elapsed_s"] = round(loop.time() - state["t0"], 3)

    t0 = time.time()
    try:
        asyncio.run(amain())
    except KeyboardInterrupt:
        state["exit"] = ic.EXIT_OK
    pub = state.get("pub")
    host, port, path = args.relay
    summary = {
        "role": "publisher", "impl": "aiomoqt",
        "result": ic.RESULT_NAMES[state["exit"]], "exit_code": state["exit"],
        "error": state["error"], "relay": f"{host}:{port}{path}",
        "draft": args.draft, "namespace": ic.ns_display(args.ns_tuple),
        "track": args.track, "groups": args.groups,
        "objects_per_group": args.objects_per_group,
        "object_size": args.object_size, "seed": args.seed,
        "subgroup_type": f"0x{args.subgroup_type:x}",
        "announced": bool(pub and pub.announced),
        "stopped_by": state["stopped_by"],
        "elapsed_s": state.get("elapsed_s", round(time.time() - t0, 3)),
    }
    if pub is not None:
        summary.update(pub.stats)
        summary["errors"] = pub.errors
    ic.emit_summary(summary)
    sys.exit(state["exit"])


if __name__ == "__main__":
    main()
