"""Shared helpers for aiomoqt_publisher.py and aiomoqt_subscriber.py.

Written against aiomoqt 0.13.3 / aiopquic 0.6.1 (pinned by
setup_aiomoqt.sh); raw QUIC only (ALPN "moq-00" for draft-14).
"""
import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time

# Exit codes shared by both scripts (also in README.md).
EXIT_OK = 0
EXIT_VERIFY_FAILED = 1      # subscriber: wrong/unexpected bytes or incomplete at end
EXIT_USAGE = 2              # argparse
EXIT_TIMEOUT = 3            # hard timeout before the job was done
EXIT_CONNECT = 4            # QUIC handshake / MoQT SETUP failed, or session died
EXIT_REFUSED = 5            # PUBLISH_NAMESPACE / SUBSCRIBE / FETCH answered with an error
EXIT_ERROR = 6              # anything else (bug, protocol violation seen by aiomoqt)

RESULT_NAMES = {
    EXIT_OK: "ok", EXIT_VERIFY_FAILED: "verify_failed", EXIT_USAGE: "usage",
    EXIT_TIMEOUT: "timeout", EXIT_CONNECT: "connect_failed",
    EXIT_REFUSED: "refused", EXIT_ERROR: "error",
}


def parse_relay(value: str):
    """HOST:PORT, [V6]:PORT or moqt://host:port[/path] -> (host, port, path).
    Always raw QUIC: aiomoqt treats a bare host:port as WebTransport, these
    scripts do not."""
    if "://" in value:
        from urllib.parse import urlparse
        u = urlparse(value)
        if u.scheme != "moqt" or not u.hostname or not u.port:
            raise argparse.ArgumentTypeError(
                f"{value!r}: want HOST:PORT or moqt://HOST:PORT[/path]")
        path = u.path + (f"?{u.query}" if u.query else "")
        return u.hostname, u.port, path
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r}: want HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port), ""


def add_common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--relay", required=True, type=parse_relay,
                    metavar="HOST:PORT",
                    help="relay address (raw QUIC); moqt://HOST:PORT[/path] also accepted")
    ns = ap.add_mutually_exclusive_group(required=True)
    ns.add_argument("--namespace", metavar="A/B/C",
                    help="track namespace, split on '/' into tuple fields "
                         "(empty fields are an error)")
    ns.add_argument("--ns-field", action="append", metavar="FIELD",
                    help="one namespace tuple field, verbatim (UTF-8); repeat "
                         "for each field. Use this when a field contains '/', "
                         "e.g. the KVCache tuple ('moq://kvcache.moq.arpa/v1/', model, prompt)")
    ap.add_argument("--track", required=True, help="track name (UTF-8)")
    ap.add_argument("--groups", type=int, required=True, metavar="G")
    ap.add_argument("--objects-per-group", type=int, required=True, metavar="N")
    ap.add_argument("--object-size", type=int, required=True, metavar="BYTES")
    ap.add_argument("--seed", type=int, required=True, metavar="S")
    ap.add_argument("--draft", type=int, default=14,
                    help="MoQT draft to offer (default 14: ALPN moq-00, "
                         "CLIENT_SETUP version 0xff00000e)")
    ap.add_argument("--auth-token", metavar="HEX", type=bytes.fromhex,
                    help="AUTHORIZATION TOKEN value (hex; e.g. from `kvcast-moqt token`) "
                         "sent with the PUBLISH_NAMESPACE / SUBSCRIBE / FETCH")
    ap.add_argument("--ca-file", metavar="PEM",
                    help="verify the relay certificate against this CA file; "
                         "without it the certificate is NOT verified")
    ap.add_argument("--timeout", type=float, default=60.0, metavar="SEC",
                    help="overall timeout (default 60); the process is cut off "
                         "at SEC+5 whatever it is doing")
    ap.add_argument("--connect-timeout", type=float, default=10.0, metavar="SEC",
                    help="limit for the QUIC handshake + SETUP exchange (default 10)")
    ap.add_argument("--debug", action="store_true",
                    help="aiomoqt DEBUG logging on stderr")


def check_counts(ap: argparse.ArgumentParser, args) -> None:
    for name in ("groups", "objects_per_group", "object_size", "seed"):
        if getattr(args, name) < 0:
            ap.error(f"--{name.replace('_', '-')} must be >= 0")
    if args.groups < 1 or args.objects_per_group < 1:
        ap.error("--groups and --objects-per-group must be >= 1")
    if args.namespace is not None:
        fields = args.namespace.split("/")
        if any(f == "" for f in fields):
            ap.error(f"--namespace {args.namespace!r} has an empty field")
        args.ns_tuple = tuple(f.encode() for f in fields)
    else:
        args.ns_tuple = tuple(f.encode() for f in args.ns_field)
    if not 1 <= len(args.ns_tuple) <= 32:
        ap.error("a namespace has 1..32 fields")
    args.track_bytes = args.track.encode()
    if len(args.track_bytes) + sum(len(f) for f in args.ns_tuple) > 4096:
        ap.error("full track name longer than 4096 bytes")


def setup_logging(debug: bool) -> None:
    from aiomoqt.utils.logger import set_log_level
    level = logging.DEBUG if debug else logging.WARNING
    set_log_level(level)
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def make_client(args):
    from aiomoqt.client import MOQTClient
    host, port, path = args.relay
    return MOQTClient(
        host, port, path=path, use_quic=True,
        verify_tls=args.ca_file is not None, ca_file=args.ca_file,
        supported_drafts=args.draft, debug=args.debug)


def auth_params(args):
    """Message parameters carrying --auth-token (aiomoqt wraps the bytes as a
    USE_VALUE Token of type 0), or None."""
    if not args.auth_token:
        return None
    from aiomoqt.types import ParamType
    return {ParamType.AUTH_TOKEN: args.auth_token}


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {os.path.basename(sys.argv[0])}: {msg}",
          file=sys.stderr, flush=True)


def emit_summary(summary: dict) -> None:
    """The one JSON line on stdout."""
    sys.stdout.write(json.dumps(summary, sort_keys=True) + "\n")
    sys.stdout.flush()


def install_stop_signals(loop, stop_event) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop_event.set)
        except (NotImplementedError, RuntimeError):
            pass


def ns_display(ns_tuple) -> list:
    return [f.decode("utf-8", "backslashreplace") for f in ns_tuple]


async def supervise(coro, state: dict, connect_timeout: float,
                    hard_timeout: float) -> str:
    """Run coro under two limits: while state["phase"] == "connect" it has
    connect_timeout seconds (QUIC handshake + CLIENT_SETUP/SERVER_SETUP),
    and hard_timeout seconds overall. Returns "done", "connect_timeout" or
    "timeout"; exceptions from coro propagate."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(coro)
    t0 = loop.time()
    await asyncio.wait({task}, timeout=min(connect_timeout, hard_timeout))
    if not task.done() and state.get("phase") == "connect":
        reason = "connect_timeout"
    else:
        remaining = hard_timeout - (loop.time() - t0)
        if not task.done() and remaining > 0:
            await asyncio.wait({task}, timeout=remaining)
        if task.done():
            task.result()   # re-raise
            return "done"
        reason = "timeout"
    task.cancel()
    try:
        await asyncio.wait_for(task, 3)
    except BaseException:  # noqa: BLE001
        pass
    return reason


async def wait_until(cond, event, deadline):
    """Waits until cond() holds, re-checking whenever `event` is set (and at
    least every 0.25 s); False once the loop time passes `deadline`."""
    loop = asyncio.get_running_loop()
    while not cond():
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        event.clear()
        try:
            await asyncio.wait_for(event.wait(), min(remaining, 0.25))
        except (asyncio.TimeoutError, TimeoutError):
            pass
    return True
