"""The vLLM flags for a model on a GPU, from the evidence (measured > predicted + field reports).

Examples:
  probe recommend --model 122b                       (GPU of the measured matrix in matrices/)
  probe recommend --model 35b --gpu sm_110a --json
  probe recommend --model ./my-model/config.json --matrix matrix.json
Default --matrix: $PROBE_MATRICES, else the published matrices shipped with probe (matrices/ of its source).
Field reports: the packaged base (`probe reports`), plus --reports FILE and $PROBE_REPORTS.
Exit: 0 answered; 2 usage error (unknown model / GPU); 3 no working pair in the evidence; 6 bad matrix.
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
    p.add_argument("--tp", type=int, help="only evidence at this tensor-parallel degree")
    p.add_argument(
        "--reports",
        action="append",
        metavar="FILE",
        help="extra field-report file (repeatable; added to $PROBE_REPORTS)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


RULED_OUT_SHOWN = 8


def _ruled_out_digest(ruled: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most RULED_OUT_SHOWN ruled-out cells for the text view: field reports and crashes first,
    then one cell per distinct root cause (a measured matrix refuses the same value at every shape)."""
    rank = {"reported": 0, "measured": 1}
    order = sorted(
        ruled,
        key=lambda e: (rank.get(e.get("source", ""), 2), e.get("outcome") == "unsupported", e.get("id", "")),
    )
    seen: set[str] = set()
    first: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for e in order:
        key = str(e.get("root_cause") or e.get("outcome"))
        (rest if key in seen else first).append(e)
        seen.add(key)
    return (first + rest)[:RULED_OUT_SHOWN]


def _pair_label(ru: dict[str, Any]) -> str:
    """'marlin + FLASH_ATTN (FA2)', 'auto + TRITON_ATTN, gdn_prefill_backend=triton'."""
    label = f"{ru.get('moe_backend') or '-'} + {ru.get('attention_backend')}"
    if ru.get("fa_version"):
        label += f" (FA{ru['fa_version']})"
    extra = ru.get("engine_args") or {}
    return label + "".join(f", {k}={v}" for k, v in sorted(extra.items()))


def execute(args: argparse.Namespace) -> int:
    import json
    import shlex
    from pathlib import Path

    from probe.errors import EXIT_NOTHING_TO_COMPARE
    from probe.recommend.recommender import recommend

    if args.reports:  # the recommender reads extra report files from $PROBE_REPORTS
        import os

        os.environ["PROBE_REPORTS"] = os.pathsep.join([*args.reports, os.environ.get("PROBE_REPORTS", "")])

    rec = recommend(
        args.model,
        matrices=[Path(m) for m in args.matrix] if args.matrix else None,
        gpu=args.gpu,
        quant=args.quant,
        tp=args.tp,
    )
    r = rec.to_dict()
    found = rec.found
    if args.json:
        print(json.dumps(r, indent=1))
        return 0 if found else EXIT_NOTHING_TO_COMPARE
    words = {
        "measured": "measured on this GPU",
        "measured+predicted": "measured on this GPU + predictions",
        "predicted+reported": "vLLM's own checks, static predictions + field reports",
    }
    basis = words.get(r["basis"], r["basis"])
    print(f"{r['model']} ({r['quant']}) on {r['gpu']} ({r['gpu_name']}) — evidence: {basis}")
    for n in r["notes"]:
        print(f"note: {n}")
    for role, h in r["halves"].items():
        print(f"{role} half: {h['backend']} — {h['basis']}: {h['text']}")
    if found:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in r["env"].items())
        print("\n  " + (env + " " if env else "") + "vllm serve <model> " + shlex.join(r["flags"]))
        print(f"  (flags spelled for vLLM {r['flags_for_vllm']}{'' if r['vllm_version'] else ', assumed'})\n")
        print("why:")
        ruled = [e for e in r["evidence"] if e["role"] == "ruled_out"]
        shown = [e for e in r["evidence"] if e["role"] != "ruled_out"] + _ruled_out_digest(ruled)
        for e in shown:
            cite = f" — {e['citation']}" if e.get("citation") else ""
            cause = f" ({e['root_cause']})" if e.get("root_cause") else ""
            note = f" [{e['note']}]" if e.get("note") else ""
            print(f"  {e['role']:10} {e['outcome']:15} [{e['source']}] {e['id']}{cause}{note}{cite}")
        if len(ruled) > RULED_OUT_SHOWN:
            print(f"  … and {len(ruled) - RULED_OUT_SHOWN} more ruled-out cells (--json lists them all)")
        if r["speed"]:
            s = r["speed"]
            print(
                f"  {s['ratio']:.2f}x vs the runner-up {_pair_label(r['runner_up'])} "
                f"({s['metric']}: {s['best']:g} vs {s['runner_up']:g})"
            )
        elif r["runner_up"]:
            print(f"  runner-up: {_pair_label(r['runner_up'])} (no timings to compare)")
    else:
        for e in r["evidence"]:
            where = f" [{e['note']}]" if e.get("note") else ""
            print(
                f"  {e['role']:10} {e['outcome']:15} [{e['source']}] {e['id']}: {e.get('root_cause')}{where}"
            )
    if r["warnings"]:
        print("warnings:")
        for w in r["warnings"]:
            print(f"  - {w}")
    return 0 if found else EXIT_NOTHING_TO_COMPARE
