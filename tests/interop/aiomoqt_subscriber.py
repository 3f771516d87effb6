#!/usr/bin/env python3
"""aiomoqt-based MoQT subscriber for kvcast relay interop tests.

Connects to a relay as a client (raw QUIC, draft-14 by default) and
receives --track under --namespace in one of three modes, verifying every
payload byte against payloads.payload(seed, group, object, object_size):

  subscribe (default)  SUBSCRIBE with --filter (default largest = Largest
                       Object, 0x2); objects may arrive on subgroup streams
                       or as datagrams.
  --fetch              standalone FETCH of Start (0,0) .. End (G-1, 0)
                       (End Object 0 = the whole of group G-1), objects on
                       the FETCH stream.
  --join               SUBSCRIBE (Largest Object) + relative joining FETCH
                       with Joining Start G (i.e. from group 0); objects
                       may come from either.

Expected objects: (g, o) for g in 0..G-1, o in 0..N-1, except that an
AbsoluteStart / AbsoluteRange filter expects only its window. Status
objects (END_OF_GROUP, END_OF_TRACK, ...) are counted, not verified.
Success (exit 0) = every expected object arrived with exactly the expected
bytes, no object had wrong bytes, no object outside the expected set
arrived, and (with --require-publish-done) PUBLISH_DONE arrived.
Duplicates with identical bytes are counted but not an error.

SUBSCRIBE/FETCH errors are retried every 0.5 s while --retry-for lasts
(useful when the publisher may not have announced yet).

Exit codes: 0 ok, 1 verification failed (wrong bytes / unexpected object,
or the subscription/fetch ended with objects missing), 2 usage,
3 timeout with objects missing, 4 connect/SETUP failed or session closed,
5 SUBSCRIBE/FETCH refused, 6 other error. One JSON summary line on stdout;
logs on stderr.
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

EXT_TYPE = 0x41
FILTERS = {"next-group": 0x1, "largest": 0x2, "absolute-start": 0x3,
           "absolute-range": 0x4}


def parse_args():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="See tests/interop/README.md.")
    ic.add_common_args(ap)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--fetch", action="store_true",
                      help="standalone FETCH of groups 0..G-1 instead of SUBSCRIBE")
    mode.add_argument("--join", action="store_true",
                      help="SUBSCRIBE + relative joining FETCH from group 0")
    ap.add_argument("--filter", choices=sorted(FILTERS), default="largest",
                    help="SUBSCRIBE filter (default largest)")
    ap.add_argument("--start-group", type=int, default=0)
    ap.add_argument("--start-object", type=int, default=0)
    ap.add_argument("--end-group", type=int, default=None,
                    help="AbsoluteRange End Group, inclusive (default G-1)")
    ap.add_argument("--retry-for", type=float, default=0.0, metavar="SEC",
                    help="retry a refused SUBSCRIBE/FETCH for this long")
    ap.add_argument("--require-publish-done", action="store_true",
                    help="(subscribe/join) also require PUBLISH_DONE")
    ap.add_argument("--expect-extension", action="store_true",
                    help=f"require extension 0x{EXT_TYPE:x} = b'kvcast:{{g}}:{{o}}' "
                         "on every object (aiomoqt_publisher.py --with-extension)")
    ap.add_argument("--done-grace", type=float, default=2.0, metavar="SEC",
                    help="after PUBLISH_DONE, wait this long for late objects "
                         "before declaring objects missing (default 2)")
    args = ap.parse_args()
    ic.check_counts(ap, args)
    args.mode = "fetch" if args.fetch else "join" if args.join else "subscribe"
    if args.end_group is None:
        args.end_group = args.groups - 1
    return args


class Verifier:
    def __init__(self, args):
        self.a = args
        G, N = args.groups, args.objects_per_group
        if args.mode == "subscribe" and args.filter in ("absolute-start",
                                                        "absolute-range"):
            start = (args.start_group, args.start_object)
            last_g = args.end_group if args.filter == "absolute-range" else G - 1
            self.expected = {(g, o) for g in range(G) for o in range(N)
                             if (g, o) >= start and g <= last_g}
        else:
            self.expected = {(g, o) for g in range(G) for o in range(N)}
        self.got = set()
        self.mismatches = []        # (g, o, why)
        self.unexpected = []        # (g, o)
        self.duplicates = 0
        self.status_objects = {}    # status name -> count
        self.ext_bad = 0
        self.via = {"subgroup": 0, "datagram": 0, "fetch": 0}
        self.bytes = 0
        self.changed = asyncio.Event()
        self.publish_done = None
        self.first_at = None
        self.last_at = None

    @property
    def complete(self) -> bool:
        return self.expected <= self.got

    @property
    def failed(self) -> bool:
        return bool(self.mismatches or self.unexpected or self.ext_bad)

    def _record(self, via, g, o, status, data, exts):
        from aiomoqt.types import ObjectStatus
        now = time.monotonic()
        self.first_at = self.first_at or now
        self.last_at = now
        if status not in (None, ObjectStatus.NORMAL, 0):
            try:
                name = ObjectStatus(status).name
            except ValueError:
                name = str(int(status))
            self.status_objects[name] = self.status_objects.get(name, 0) + 1
            return
        self.via[via] += 1
        self.bytes += len(data)
        key = (g, o)
        if key not in self.expected:
            self.unexpected.append(key)
        else:
            want = payload(self.a.seed, g, o, self.a.object_size)
            if data != want:
                why = (f"length {len(data)} != {len(want)}" if len(data) != len(want)
                       else f"first differing byte at {next(i for i in range(len(want)) if data[i] != want[i])}")
                self.mismatches.append((g, o, why))
            elif key in self.got:
                self.duplicates += 1
            else:
                self.got.add(key)
            if self.a.expect_extension:
                val = (exts or {}).get(EXT_TYPE)
                if val is None or bytes(val) != f"kvcast:{g}:{o}".encode():
                    self.ext_bad += 1
        self.changed.set()

    # aiomoqt object callbacks (the object header object is reused per stream:
    # copy what is kept).
    def on_object(self, msg, size, recv_us, group_id=None, subgroup_id=None):
        gid = getattr(msg, "group_id", None)
        g = group_id if gid is None else gid
        via = "datagram" if type(msg).__name__.startswith("ObjectDatagram") else "subgroup"
        self._record(via, g, msg.object_id, getattr(msg, "status", None),
                     bytes(msg.payload or b""), getattr(msg, "extensions", None))

    def on_fetch_object(self, msg, size=0, recv_us=0, request_id=None):
        self._record("fetch", msg.group_id, msg.object_id,
                     getattr(msg, "status", None), bytes(msg.payload or b""),
                     getattr(msg, "extensions", None))

    def on_done(self, msg):
        self.publish_done = {"status_code": int(msg.status_code),
                             "stream_count": int(msg.stream_count),
                             "reason": str(getattr(msg, "reason", "") or "")}
        self.changed.set()

    def missing(self):
        return sorted(self.expected - self.got)


async def request_with_retry(make, args, deadline, state, what):
    """make() sends the request and returns its response (raises
    MOQTRequestError on an error reply). Retries while --retry-for lasts."""
    from aiomoqt.types import MOQTRequestError
    loop = asyncio.get_running_loop()
    retry_until = state["t0"] + args.retry_for
    attempt = 0
    while True:
        attempt += 1
        try:
            resp = await make(max(0.5, deadline - loop.time()))
            state["attempts"] = attempt
            return resp
        except MOQTRequestError as e:
            state["attempts"] = attempt
            state["last_refusal"] = {"code": int(e.error_code), "reason": str(e.reason)}
            if loop.time() + 0.5 < min(retry_until, deadline):
                ic.log(f"{what} refused (code={e.error_code} {e.reason}); retrying")
                await asyncio.sleep(0.5)
                continue
            raise


async def run(args, ver: Verifier, state: dict):
    from aiomoqt.types import FetchType, FilterType, MOQTRequestError
    loop = asyncio.get_running_loop()
    deadline = state["t0"] + args.timeout
    client = ic.make_client(args)
    state["phase"] = "connect"
    async with client.connect() as session:
        await session.client_session_init(timeout=max(1, int(args.connect_timeout)))
        state["phase"] = args.mode
        ns, name = args.ns_tuple, args.track_bytes
        ended = asyncio.Event()     # the server says no more objects will come

        try:
            if args.mode == "fetch":
                async def make(timeout):
                    msg = session.fetch(namespace=ns, track_name=name,
                                        start_group=0, start_object=0,
                                        end_group=args.groups - 1, end_object=0,
                                        parameters=ic.auth_params(args),
                                        on_object=ver.on_fetch_object)
                    return await session._await_response(msg.request_id, timeout=timeout)
                ok = await request_with_retry(make, args, deadline, state, "FETCH")
                state["fetch_ok"] = {"end_of_track": int(ok.end_of_track),
                                     "end_location": [ok.largest_group_id,
                                                      ok.largest_object_id]}
                ic.log(f"FETCH_OK {state['fetch_ok']}")
                fin = await session.await_fetch_done(
                    ok.request_id, timeout=max(0.1, deadline - loop.time()))
                state["fetch_stream_clean"] = bool(fin)
                ended.set()
            elif args.mode == "subscribe":
                ft = FILTERS[args.filter]

                async def make(timeout):
                    msg = session.subscribe(
                        namespace=ns, track_name=name, filter_type=FilterType(ft),
                        start_group=args.start_group, start_object=args.start_object,
                        end_group=args.end_group, on_object=ver.on_object,
                        on_done=ver.on_done, parameters=ic.auth_params(args))
                    return await session._await_response(msg.request_id, timeout=timeout)
                ok = await request_with_retry(make, args, deadline, state, "SUBSCRIBE")
                state["subscribe_ok"] = _sub_ok(ok)
                ic.log(f"SUBSCRIBE_OK {state['subscribe_ok']}")
            else:  # join
                async def make(timeout):
                    state.pop("fetch_error", None)
                    state.pop("fetch_ok", None)
                    sub_msg, fetch_msg = await session.join(
                        namespace=ns, track_name=name,
                        fetch_type=FetchType.RELATIVE_JOINING,
                        joining_start=args.groups, on_object=ver.on_object)
                    session.register_fetch_object_handler(fetch_msg.request_id,
                                                          ver.on_fetch_object)
                    session.register_publish_done_handler(sub_msg.request_id,
                                                          ver.on_done)
                    state["join_fetch_rid"] = fetch_msg.request_id
                    sub_ok = await session._await_response(sub_msg.request_id,
                                                           timeout=timeout)
                    try:
                        fok = await session._await_response(fetch_msg.request_id,
                                                            timeout=timeout)
                        state["fetch_ok"] = {"end_of_track": int(fok.end_of_track),
                                             "end_location": [fok.largest_group_id,
                                                              fok.largest_object_id]}
                    except MOQTRequestError as e:
                        # Content Exists 0: nothing to join, all objects
                        # come from the subscription (draft-14 9.16.2).
                        state["fetch_error"] = {"code": int(e.error_code),
                                                "reason": str(e.reason)}
                        if getattr(sub_ok, "content_exists", 1):
                            # A retry must not leave a second active
                            # subscription to the same track in this session.
                            session.unsubscribe(sub_msg.request_id)
                            raise
                    return sub_ok
                ok = await request_with_retry(make, args, deadline, state, "JOIN")
                state["subscribe_ok"] = _sub_ok(ok)
                ic.log(f"SUBSCRIBE_OK {state['subscribe_ok']} "
                       f"fetch={state.get('fetch_ok') or state.get('fetch_error')}")
        except MOQTRequestError as e:
            state["exit"] = ic.EXIT_REFUSED
            state["error"] = f"{args.mode} refused: code={e.error_code} {e.reason}"
            return

        # Wait: all objects, or the server's end (PUBLISH_DONE + grace /
        # FETCH stream FIN), or a verification failure, or the deadline.
        def done_enough():
            if ver.failed:
                return True
            if ver.complete and (not args.require_publish_done
                                 or args.mode == "fetch" or ver.publish_done):
                return True
            if session._close_err is not None:
                return True
            return ended.is_set() or ver.publish_done is not None
        await ic.wait_until(done_enough, ver.changed, deadline)
        if (ver.publish_done is not None and not ver.complete and not ver.failed
                and session._close_err is None):
            # PUBLISH_DONE can overtake late streams.
            await ic.wait_until(lambda: ver.complete or ver.failed, ver.changed,
                             min(deadline, loop.time() + args.done_grace))
        if args.mode == "fetch" and not ver.complete and not ver.failed:
            await ic.wait_until(lambda: ver.complete or ver.failed, ver.changed,
                             min(deadline, loop.time() + 0.5))
        if ver.failed:
            state["exit"] = ic.EXIT_VERIFY_FAILED
            state["error"] = "payload mismatch or unexpected objects"
        elif ver.complete and (not args.require_publish_done or args.mode == "fetch"
                               or ver.publish_done):
            state["exit"] = ic.EXIT_OK
        elif session._close_err is not None:
            state["exit"] = ic.EXIT_CONNECT
            state["error"] = f"session closed: {session._close_err}"
        elif ended.is_set() or ver.publish_done is not None:
            state["exit"] = ic.EXIT_VERIFY_FAILED
            state["error"] = ("ended with objects missing" if not ver.complete
                              else "no PUBLISH_DONE")
        else:
            state["exit"] = ic.EXIT_TIMEOUT
            state["error"] = ("timeout with objects missing" if not ver.complete
                              else "timeout waiting for PUBLISH_DONE")
        session.close()


def _sub_ok(ok):
    d = {"track_alias": getattr(ok, "track_alias", None),
         "content_exists": int(getattr(ok, "content_exists", 0) or 0),
         "group_order": int(getattr(ok, "group_order", 0) or 0)}
    if d["content_exists"]:
        d["largest"] = [ok.largest_group_id, ok.largest_object_id]
    return d


def main():
    args = parse_args()
    ic.setup_logging(args.debug)
    state = {"exit": ic.EXIT_ERROR, "error": None, "phase": "start"}
    ver_box = {}

    async def amain():
        loop = asyncio.get_running_loop()
        state["t0"] = loop.time()
        ver = Verifier(args)
        ver_box["v"] = ver
        try:
            why = await ic.supervise(run(args, ver, state), state,
                                     args.connect_timeout, args.timeout + 5)
            if why == "connect_timeout":
                state["exit"] = ic.EXIT_CONNECT
                state["error"] = f"no SERVER_SETUP within {args.connect_timeout}s"
            elif why == "timeout":
                state["exit"] = ic.EXIT_VERIFY_FAILED if ver.failed else ic.EXIT_TIMEOUT
                state["error"] = f"hard timeout in phase {state['phase']}"
        except Exception as e:  # noqa: BLE001
            state["exit"] = ic.EXIT_CONNECT if state["phase"] == "connect" else ic.EXIT_ERROR
            state["error"] = f"{state['phase']}: {type(e).__name__}: {e}"
        state["elapsed_s"] = round(loop.time() - state["t0"], 3)

    t0 = time.time()
    try:
        asyncio.run(amain())
    except KeyboardInterrupt:
        state["exit"] = ic.EXIT_TIMEOUT
        state["error"] = "interrupted"
    ver = ver_box.get("v")
    host, port, path = args.relay
    summary = {
        "role": "subscriber", "impl": "aiomoqt", "mode": args.mode,
        "result": ic.RESULT_NAMES[state["exit"]], "exit_code": state["exit"],
        "error": state["error"], "relay": f"{host}:{port}{path}",
        "draft": args.draft, "namespace": ic.ns_display(args.ns_tuple),
        "track": args.track, "groups": args.groups,
        "objects_per_group": args.objects_per_group,
        "object_size": args.object_size, "seed": args.seed,
        "elapsed_s": state.get("elapsed_s", round(time.time() - t0, 3)),
    }
    if args.mode == "subscribe":
        summary["filter"] = args.filter
    for k in ("subscribe_ok", "fetch_ok", "fetch_error", "fetch_stream_clean",
              "attempts", "last_refusal"):
        if k in state:
            summary[k] = state[k]
    if ver is not None:
        missing = ver.missing()
        summary.update({
            "expected": len(ver.expected), "received_ok": len(ver.got),
            "missing": len(missing), "missing_sample": missing[:10],
            "mismatched": len(ver.mismatches),
            "mismatch_sample": ver.mismatches[:10],
            "unexpected": len(ver.unexpected),
            "unexpected_sample": ver.unexpected[:10],
            "duplicates": ver.duplicates, "status_objects": ver.status_objects,
            "extension_errors": ver.ext_bad, "via": ver.via,
            "payload_bytes": ver.bytes, "publish_done": ver.publish_done,
        })
    ic.emit_summary(summary)
    sys.exit(state["exit"])


if __name__ == "__main__":
    main()
