"""``python -m harness run``: one episode, printed turn by turn, for a person to watch (docs/architecture.md §The agent system).

The offline world is served on 127.0.0.1 (real HTTP), the agents use the real ``search`` and
``visit`` tools, and the planner's ``delegate`` calls run sub-agent episodes in process. The
planner's turns are printed in order; after each ``delegate`` call, the sub-agent episode it
started is printed indented, then the result the planner sees.

``--model`` is a registry name (``tiny``: untrained, for plumbing only), a model directory, or a
warm-start / checkpoint directory holding ``planner/`` and ``sub_agent/`` (``single_agent/``
with ``--single``).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Any

from harness.rollout import AgentRuntime, InProcessSubAgent, Query, RolloutConfig, SubAgentEngine, run_group
from harness.checkpoint_files import BUILD_TOOL_KEYS, build_settings
from harness.tools.toolbox import AddressedToolbox, ToolsConfig, build_toolbox
from harness.world.generator import generate_world
from harness.world.search import SearchIndex
from harness.world.server import WorldServer
from harness.world.toolbox import DEFAULT_BASE_URL


def load_agents(model: str, single: bool) -> tuple[tuple[Any, Any], tuple[Any, Any] | None]:
    """(planner-or-single model, tokenizer) and (sub-agent model, tokenizer) from ``model``."""
    from harness.models import load_model  # lazy: torch; keeps `python -m harness run --help` light

    root = Path(model)
    if root.is_dir() and (root / ("single_agent" if single else "planner")).is_dir():
        main = load_model(str(root / ("single_agent" if single else "planner")))
        sub = None if single else load_model(str(root / "sub_agent"))
        return main, sub
    main = load_model(model)
    return main, (None if single else main)


def _print_messages(messages: list[dict[str, str]], indent: str, width: int, sub_results: list[Any]) -> None:
    subs = iter(sub_results)
    for msg in messages[1:]:  # skip the system prompt
        role = msg["role"]
        body = msg["content"]
        if role == "tool" and len(body) > width * 6:
            body = body[: width * 6] + " ..."
        print(textwrap.indent(f"[{role}] {body}", indent))
        if role == "assistant" and '"delegate"' in body:
            res = next(subs, None)
            if res is not None and res.trajectory is not None:
                print(textwrap.indent(f"--- sub-agent call {res.call} (policy v{res.policy_version}) ---", indent + "    "))
                _print_messages(res.trajectory.messages, indent + "    ", width, [])
                print(textwrap.indent("--- end of sub-agent call ---", indent + "    "))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--question", required=True, help="the question to answer")
    ap.add_argument("--model", default="tiny", help="model name, model dir, or warm-start dir with planner/ sub_agent/")
    ap.add_argument("--world-seed", type=int, default=None,
                    help="seed of the offline world (default: a warm-start folder's check world, else 0)")
    ap.add_argument("--world-size", default=None,
                    help="world preset: tiny, small, default (default: a warm-start folder's, else small)")
    ap.add_argument("--visit", choices=("direct", "playwright"), default="direct", help="visit backend")
    ap.add_argument("--single", action="store_true", help="run the single agent (search/visit itself)")
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from harness.backends import HFBackend  # lazy: torch; keeps `python -m harness run --help` light

    # A warm-start folder is watched with the observations it was built with: its tool settings and the
    # demonstrations' address (http://world.local, mapped to the live server), as `pytest benchmarks/ --model` does.
    built = build_settings(Path(args.model)) if Path(args.model).is_dir() else {}
    world_seed = args.world_seed if args.world_seed is not None else int(built.get("world_seed", 0))
    world_size = args.world_size or str(built.get("world_size", "small"))
    tools = ToolsConfig(visit_backend=args.visit,
                        **{k: built[k] for k in BUILD_TOOL_KEYS if k in built})
    (model, tok), sub = load_agents(args.model, args.single)
    world = generate_world(seed=world_seed, size=world_size)
    cfg = RolloutConfig(k=1, temperature=args.temperature, max_new_tokens=args.max_new_tokens, context_tokens=8192)
    with WorldServer(world) as srv:
        address = DEFAULT_BASE_URL if built else None
        print(f"world seed {world_seed} ({world_size}) served at {srv.base_url}"
              + (f", shown to the agents as {address} (the warm start's address)" if address else ""), flush=True)
        inner = build_toolbox(tools, SearchIndex.build(world), srv.base_url)
        toolbox = AddressedToolbox(inner, address, srv.base_url) if address else inner
        try:
            runtime = AgentRuntime(HFBackend(model, tok), tok)
            if args.single:
                res = run_group([Query("q", args.question)], runtime, cfg, toolbox=toolbox, seed=args.seed)
            else:
                engine = SubAgentEngine(AgentRuntime(HFBackend(sub[0], sub[1]), sub[1]), toolbox, cfg, seed=args.seed)
                res = run_group([Query("q", args.question)], runtime, cfg, sub_agent=InProcessSubAgent(engine),
                                seed=args.seed)
                engine.close()
        finally:
            toolbox.close()
    ep = res.episodes[0]
    _print_messages(ep.trajectory.messages, "", 100, ep.sub_results)
    t = ep.trajectory
    print(f"\nanswer: {t.final!r}  (turns {t.n_turns}, sub-agent calls {len(ep.sub_results)}, "
          f"format ok {t.format_ok}, end: {t.end_reason})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
