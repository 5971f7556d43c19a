"""``python -m harness world <serve|tasks> ...`` (docs/world.md, README.md).

* ``serve --seed N [--size S] [--host H] [--port P] [--test-routes]`` -- serve the world on 127.0.0.1 (or ``--host``)
  and print its address (first stdout line: ``Serving ... at http://127.0.0.1:PORT/``) until
  Ctrl-C / SIGTERM.
* ``tasks --seed N --out DIR [--size S] [--n N | --n-train N --n-test N] [--base-url URL]
  [--no-verify]`` -- write ``DIR/<benchmark>/<split>.jsonl`` (+ ``DIR/gaia/files/*.csv``).

Errors (bad seed or size, a taken port) go to stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from harness.world.generator import SIZES, WorldConfig, generate_world
from harness.world.server import WorldServer
from harness.world.tasks import TaskConfig, generate_tasks, write_tasks
from harness.world.toolbox import DEFAULT_BASE_URL


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness world", description="The offline web world (docs/world.md).")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--seed", type=int, required=True, help="world seed (an int >= 0)")
        sp.add_argument("--size", default="default", help=f"world size preset: {'|'.join(SIZES)} (default: default)")

    s = sub.add_parser("serve", help="serve the world over HTTP (127.0.0.1 unless --host) for a person or the roles")
    common(s)
    s.add_argument("--host", default="127.0.0.1",
                   help="bind address (default 127.0.0.1; another node's roles need this node's address, or 0.0.0.0)")
    s.add_argument("--port", type=int, default=0, help="port (default 0: a free port)")
    s.add_argument("--test-routes", action="store_true", help="also serve the /__test__/ routes (slow, error, ...)")
    s.add_argument("--verbose", action="store_true", help="log every request to stderr")

    t = sub.add_parser("tasks", help="write GAIA / WebWalkerQA / XBench-style tasks as JSONL")
    common(t)
    t.add_argument("--out", required=True, help="output directory")
    t.add_argument("--n", type=int, default=None, help="tasks per benchmark and split (sets --n-train and --n-test)")
    t.add_argument("--n-train", type=int, default=200, help="tasks per benchmark in the train split (default 200)")
    t.add_argument("--n-test", type=int, default=50, help="tasks per benchmark in the test split (default 50)")
    t.add_argument("--test-fraction", type=float, default=0.25, help="share of entities held out for test (default 0.25)")
    t.add_argument("--base-url", default=DEFAULT_BASE_URL, help=f"base URL written into tasks (default {DEFAULT_BASE_URL})")
    t.add_argument("--no-verify", action="store_true", help="skip the scripted-expert solvability check")
    return p


def _serve(args: argparse.Namespace) -> int:
    world = generate_world(WorldConfig(seed=args.seed, size=args.size))
    stop = threading.Event()
    # Ctrl-C and SIGTERM stop it even when SIGINT was ignored in the parent (a process started from a
    # background job or a test worker inherits SIG_IGN, and Python then raises no KeyboardInterrupt).
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with WorldServer(world, port=args.port, host=args.host, test_routes=args.test_routes, verbose=args.verbose) as srv:
        print(f"Serving the offline world (seed {args.seed}, size {args.size}, {len(world.pages)} pages) "
              f"at {srv.base_url}/ -- press Ctrl-C to stop", flush=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    return 0


def _tasks(args: argparse.Namespace) -> int:
    n_train, n_test = (args.n, args.n) if args.n is not None else (args.n_train, args.n_test)
    cfg = TaskConfig(n_train=n_train, n_test=n_test, test_fraction=args.test_fraction, base_url=args.base_url,
                     verify=not args.no_verify)
    world = generate_world(WorldConfig(seed=args.seed, size=args.size))
    taskset = generate_tasks(world, cfg)
    paths = write_tasks(taskset, args.out)
    for (bench, split), tasks in sorted(taskset.tasks.items()):
        print(f"{bench:12s} {split:5s} {len(tasks):5d} tasks")
    print(f"wrote {len(paths)} files under {args.out} (expert rejected: {taskset.rejected})")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _serve(args) if args.command == "serve" else _tasks(args)
    except (ValueError, OSError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
