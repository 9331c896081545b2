"""The vLLM flags for a model on a GPU, from the evidence (measured > predicted + field reports).

One vLLM version per answer: --vllm, else the vLLM of --scan (a `probe scan --json` report of the
image), else the vLLM installed beside this Python, else the one the GPU's matrix was measured
with, else the newest version with published predictions. vLLM's own checks, the static scan and
the flag spellings all come from that version (a version without published checks uses the nearest
one's, and says so).

Examples:
  probe recommend --model 122b                       (GPU of the measured matrix in matrices/)
  probe recommend --model 35b --gpu sm_110a --vllm 0.30.0 --json
  probe recommend --model 120b --gpu sm_100 --kv-cache-dtype fp8 --tp 2 --ep
  probe recommend --model nano --gpu sm_121 --why-not flashinfer_cutlass
  probe recommend --model ./my-model/config.json --matrix matrix.json --scan scan.json
Default --matrix: $PROBE_MATRICES, else the published matrices shipped with probe (matrices/ of its source).
Field reports: the packaged base (`probe reports`), plus --reports FILE and $PROBE_REPORTS.
Exit: 0 answered; 2 usage error (unknown model / GPU, bad config.json, bad flag value); 3 no working
pair in the evidence; 6 bad matrix / scan file.
"""

from __future__ import annotations

import argparse
from typing import Any

from probe.catalog.quants import QUANTS


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="profile name / alias (122b), HF id, config.json or folder")
    p.add_argument("--matrix", action="append", metavar="PATH", help="matrix file or folder (repeatable)")
    p.add_argument("--gpu", help="target GPU (sm_110a, 12.0, thor, H100); default: the measured matrix's GPU")
    p.add_argument(
        "--quant",
        choices=QUANTS,
        help="quant format (default: the profile's)",
    )
    p.add_argument(
        "--tp", type=_positive, help="tensor-parallel degree (default: any evidence; 1 for checks)"
    )
    p.add_argument("--vllm", metavar="X.Y.Z", help="the vLLM version the answer is for (default: see above)")
    p.add_argument("--scan", metavar="SCAN.json", help="`probe scan --json` report of the image (its vLLM)")
    p.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
        help="vLLM's --kv-cache-dtype (default: auto)",
    )
    p.add_argument("--ep", action="store_true", help="serve with --enable-expert-parallel")
    p.add_argument("--dp", type=_positive, default=1, help="data-parallel size (default 1)")
    p.add_argument(
        "--speculative",
        metavar="METHOD",
        help="speculative decoding method of --speculative-config (mtp, eagle3, ngram, …)",
    )
    p.add_argument("--why-not", metavar="BACKEND", help="print the evidence against one backend")
    p.add_argument(
        "--ask-vllm",
        metavar="PYTHON",
        help="ask this Python's vLLM about the model now (needed for models vLLM's published checks do not "
        "cover, e.g. a config.json; ~20 s, then cached; 'this' = this interpreter)",
    )
    p.add_argument(
        "--reports",
        action="append",
        metavar="FILE",
        help="extra field-report file (repeatable; added to $PROBE_REPORTS)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive size")
    return value


def _pair_label(ru: dict[str, Any]) -> str:
    """'marlin + FLASH_ATTN (FA2)', 'auto + TRITON_ATTN, gdn_prefill_backend=triton'."""
    label = f"{ru.get('moe_backend') or '-'} + {ru.get('attention_backend')}"
    if ru.get("fa_version"):
        label += f" (FA{ru['fa_version']})"
    extra = ru.get("engine_args") or {}
    return label + "".join(f", {k}={v}" for k, v in sorted(extra.items()))


def execute(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from probe.errors import EXIT_NOTHING_TO_COMPARE
    from probe.recommend.recommender import recommend
    from probe.recommend.types import Deployment

    kv = "fp8" if args.kv_cache_dtype.startswith("fp8") else args.kv_cache_dtype
    asked = _ask(args) if args.ask_vllm else None
    rec = recommend(
        args.model,
        matrices=[Path(m) for m in args.matrix] if args.matrix else None,
        gpu=args.gpu,
        quant=args.quant,
        tp=args.tp,
        vllm=args.vllm,
        scan=Path(args.scan) if args.scan else None,
        deploy=Deployment(kv_cache_dtype=kv, ep=args.ep, dp=args.dp, speculative=args.speculative),
        why_not=args.why_not,
        asked=asked,
        report_files=args.reports,
    )
    r = rec.to_dict()
    found = rec.found
    if args.json:
        print(json.dumps(r, indent=1))
        return 0 if found else EXIT_NOTHING_TO_COMPARE
    if args.why_not:
        what = f"{r['model']} ({r['quant']}) on {r['gpu']}, vLLM {r['flags_for_vllm']}"
        print(f"why not {args.why_not} for {what}:")
        for line in r["why_not"]:
            print(f"  - {line}")
        return 0
    _print_answer(r, found)
    return 0 if found else EXIT_NOTHING_TO_COMPARE


def _ask(args: argparse.Namespace) -> Any:
    """vLLM's own verdicts for the model on the GPU, asked now in the given Python (``--ask-vllm``)."""
    import sys

    from probe.catalog.gpus import parse_target
    from probe.errors import UsageError
    from probe.oracle.ask import ask
    from probe.recommend.gather import AskedCells
    from probe.recommend.recommender import model_profile

    if not args.gpu:
        raise UsageError("--ask-vllm needs --gpu: the GPU to ask vLLM about")
    python = sys.executable if args.ask_vllm == "this" else args.ask_vllm
    got = ask(model_profile(args.model, args.quant), parse_target(args.gpu, known_only=True), python, args.tp)
    if got.skipped:
        raise UsageError(f"--ask-vllm {python}: vLLM could not be asked: {got.skipped}")
    return AskedCells(got.cells, got.vllm, f"vLLM {got.vllm} asked with --ask-vllm ({python})")


_WORDS = {
    "measured": "measured on this GPU",
    "measured+predicted": "measured on this GPU + predictions",
    "predicted+reported": "vLLM's own checks, static predictions + field reports",
}


def _print_answer(r: dict[str, Any], found: bool) -> None:
    import shlex

    basis = _WORDS.get(r["basis"], r["basis"])
    where = f"{r['gpu']} ({r['gpu_name']}), vLLM {r['flags_for_vllm']}"
    print(f"{r['model']} ({r['quant']}) on {where} — evidence: {basis}")
    for n in r["notes"]:
        print(f"note: {n}")
    for role, h in r["halves"].items():
        print(f"{role} half: {h['backend']} — {h['basis']}: {h['text']}")
    if found:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in r["env"].items())
        print("\n  " + (env + " " if env else "") + "vllm serve <model> " + shlex.join(r["flags"]))
        print(f"  (flags spelled for vLLM {r['flags_for_vllm']}{'' if r['vllm_version'] else ', assumed'})\n")
        _print_needs(r)
        print("why:")
        for e in (e for e in r["evidence"] if e["role"] != "ruled_out"):
            cite = f" — {e['citation']}" if e.get("citation") else ""
            cause = f" ({e['root_cause']})" if e.get("root_cause") else ""
            note = f" [{e['note']}]" if e.get("note") else ""
            print(f"  {e['role']:10} {e['outcome']:15} [{e['source']}] {e['id']}{cause}{note}{cite}")
        _print_comparison(r)
    else:
        for e in r["evidence"]:
            where = f" [{e['note']}]" if e.get("note") else ""
            print(
                f"  {e['role']:10} {e['outcome']:15} [{e['source']}] {e['id']}: {e.get('root_cause')}{where}"
            )
    _print_ruled_out(r["ruled_out"])
    if r["warnings"]:
        print("warnings:")
        for w in r["warnings"]:
            print(f"  - {w}")


def _print_needs(r: dict[str, Any]) -> None:
    if r["needs"]:
        print("needs:")
        for n in r["needs"]:
            print(f"  - {n}")


def _print_comparison(r: dict[str, Any]) -> None:
    if r["speed"]:
        s = r["speed"]
        print(
            f"  {s['ratio']:.2f}x vs the runner-up {_pair_label(r['runner_up'])} "
            f"({s['metric']}: {s['best']:g} vs {s['runner_up']:g})"
        )
    elif r["runner_up"]:
        print(f"  runner-up: {_pair_label(r['runner_up'])} (no timings to compare)")


def _print_ruled_out(ruled: list[dict[str, Any]]) -> None:
    """One line per backend ruled out, with the strongest reason and where to read more."""
    if not ruled:
        return
    print("ruled out:")
    for x in ruled:
        name = x["backend"] + (f" (FA{x['fa_version']})" if x.get("fa_version") else "")
        link = f" [{x['link']}]" if x.get("link") else ""
        print(f"  {x['role']:9} {name:28} {x['source']:10} {x['outcome']}: {x['reason'][:140]}{link}")
