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
        "--image",
        metavar="PATH",
        help="the image the answer is for: a wheel, an image tarball or OCI layout, a folder, or a `probe "
        "scan --json` report; its per-kernel scan decides which backends have code for the GPU",
    )
    p.add_argument("--python", metavar="PY", help="the image is this interpreter's environment (scanned)")
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
    p.add_argument(
        "--enforce-eager", action="store_true", help="serve without CUDA graphs (vLLM's --enforce-eager)"
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
    if args.why_not:
        args.why_not = known_backend(args.why_not)
    asked = _ask(args) if args.ask_vllm else None
    rec = recommend(
        args.model,
        matrices=[Path(m) for m in args.matrix] if args.matrix else None,
        gpu=args.gpu,
        quant=args.quant,
        tp=args.tp,
        vllm=args.vllm,
        scan=Path(args.scan) if args.scan else None,
        deploy=Deployment(
            kv_cache_dtype=kv,
            ep=args.ep,
            dp=args.dp,
            speculative=args.speculative,
            enforce_eager=args.enforce_eager,
        ),
        why_not=args.why_not,
        asked=asked,
        report_files=args.reports,
        image=args.image,
        python=args.python,
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
    _print_answer(r, found, bool(getattr(args, "verbose", 0)))
    return 0 if found else EXIT_NOTHING_TO_COMPARE


def known_backend(name: str) -> str:
    """``name`` as the backend catalog spells it (``flashinfer-cutlass`` -> ``flashinfer_cutlass``,
    ``flash_attn`` -> ``FLASH_ATTN``); an unknown name is a usage error with the closest names."""
    import difflib

    from probe.catalog.backends import catalog
    from probe.errors import UsageError

    cat = catalog()
    known = {*cat.names("moe"), *cat.names("attention"), *(n.name for n in cat.not_covered if n.name)}
    for candidate in (name, name.lower().replace("-", "_"), name.upper().replace("-", "_")):
        if candidate in known:
            return candidate
    close = difflib.get_close_matches(name, sorted(known), n=4, cutoff=0.5)
    close += [k for k in sorted(known) if name.lower() in k.lower() and k not in close][: 4 - len(close)]
    raise UsageError(
        f"--why-not {name!r}: no MoE or attention backend of that name",
        hint=f"did you mean: {', '.join(close)}?" if close else "`probe scan --backends` lists them",
    )


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
#: lines of a default answer beyond the fixed ones: ruled-out backends and warnings shown (-v: all)
MAX_RULED, MAX_WARNINGS = 8, 5


def _print_answer(r: dict[str, Any], found: bool, verbose: bool = False) -> None:
    """The answer a person reads in ten seconds: the flags first, each half with its strongest reason,
    what it needs, the runner-up, what was ruled out and the warnings (``verbose``: every line)."""
    import shlex

    basis = _WORDS.get(r["basis"], r["basis"])
    where = f"{r['gpu']} ({r['gpu_name']}), vLLM {r['flags_for_vllm']}"
    print(f"{r['model']} ({r['quant']}) on {where} — evidence: {basis}")
    if found:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in r["env"].items())
        print("\n  " + (env + " " if env else "") + "vllm serve <model> " + shlex.join(r["flags"]))
        print(f"  (flags spelled for vLLM {r['flags_for_vllm']}{'' if r['vllm_version'] else ', assumed'})\n")
        for role, h in r["halves"].items():
            print(f"{role + ':':10} {_backend_words(r, role, h['backend'])} — {h['basis']}: {h['text']}")
        _print_list("needs", r["needs"], len(r["needs"]))
        _print_comparison(r)
        if verbose:
            _print_evidence(r)
    else:
        for e in r["evidence"][: None if verbose else MAX_RULED]:
            where = f" [{e['note']}]" if e.get("note") else ""
            cause = e.get("root_cause")
            print(f"  {e['role']:10} {e['outcome']:15} [{e['source']}] {e['id']}: {cause}{where}")
    _print_ruled_out(r["ruled_out"], verbose)
    _print_list("warnings", r["warnings"], len(r["warnings"]) if verbose else MAX_WARNINGS)
    for n in r["notes"]:
        print(f"note: {n}")
    if r.get("image"):
        print(f"image: {r['image']}")


def _backend_words(r: dict[str, Any], role: str, backend: str | None) -> str:
    """'auto — vLLM picks marlin here', 'FLASH_ATTN (FA3)'."""
    resolved = r.get(f"{'moe' if role == 'moe' else 'attention'}_backend_resolved")
    if backend == "auto":
        return f"auto — vLLM picks {resolved} here" if resolved else "auto (vLLM's own pick)"
    return resolved or str(backend)


def _print_list(title: str, items: list[str], limit: int) -> None:
    if not items:
        return
    print(f"{title}:")
    for item in items[:limit]:
        print(f"  - {item}")
    if len(items) > limit:
        print(f"  ({len(items) - limit} more: --verbose)")


def _print_evidence(r: dict[str, Any]) -> None:
    print("why:")
    for e in (e for e in r["evidence"] if e["role"] != "ruled_out"):
        cite = f" — {e['citation']}" if e.get("citation") else ""
        cause = f" ({e['root_cause']})" if e.get("root_cause") else ""
        note = f" [{e['note']}]" if e.get("note") else ""
        print(f"  {e['role']:10} {e['outcome']:15} [{e['source']}] {e['id']}{cause}{note}{cite}")


def _print_comparison(r: dict[str, Any]) -> None:
    if r["speed"]:
        s = r["speed"]
        print(
            f"runner-up: {_pair_label(r['runner_up'])}, {s['ratio']:.2f}x slower "
            f"({s['metric']}: {s['best']:g} vs {s['runner_up']:g}, same GPU)"
        )
    elif r["runner_up"]:
        print(f"runner-up: {_pair_label(r['runner_up'])} (no timings to compare)")


def _print_ruled_out(ruled: list[dict[str, Any]], verbose: bool) -> None:
    """One line per backend ruled out that concerns the model's quant on NVIDIA (every one with
    ``--verbose``), with the strongest reason and where to read more."""
    shown = [x for x in ruled if verbose or x.get("applies", True)]
    if not shown:
        return
    more = len(ruled) - min(len(shown), len(ruled) if verbose else MAX_RULED)
    print("ruled out:" + (f" ({more} more, or not for this quant on NVIDIA: --verbose)" if more else ""))
    for x in shown[: None if verbose else MAX_RULED]:
        name = x["backend"] + (f" (FA{x['fa_version']})" if x.get("fa_version") else "")
        link = f" [{x['link']}]" if x.get("link") and verbose else ""
        print(f"  {x['role']:9} {name:24} {x['source']:10} {x['outcome']}: {x['reason'][:110]}{link}")
