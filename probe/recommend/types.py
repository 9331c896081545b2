"""The recommender's types: a cell with where it came from, the question asked, choices, pairs, answer.

Frozen dataclasses, as every value inside probe (pydantic only where a file is read or written; not
on this path: ``probe recommend`` must answer in well under 0.2 s as a whole process). Cells stay the
JSON objects of the matrix schema (``probe.matrix.schema.Cell`` fields); what the recommender knows
about a cell beyond them is a typed field of :class:`EvidenceCell`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from probe.catalog.names import norm
from probe.catalog.profile import ModelProfile
from probe.outcomes import Outcome

if TYPE_CHECKING:  # JSON shapes of the answer: for the type checker only (no class building at start-up)

    class EvidenceEntry(TypedDict):
        role: str
        id: str
        outcome: str
        source: str
        file: str | None
        citation: str | None
        root_cause: str | None
        degraded: bool
        timings: dict[str, float]
        note: str | None

    class HalfBasis(TypedDict):
        backend: str | None
        basis: str
        text: str

    class Speed(TypedDict):
        metric: str
        best: float
        runner_up: float
        ratio: float

    class RuledOut(TypedDict):
        role: str
        backend: str
        fa_version: int | None
        outcome: str
        reason: str
        source: str  # measured / reported / vllm_check / elf_scan
        vllm: str | None
        link: str | None
        applies: bool  # about this model's quant on NVIDIA (text shows only these without --verbose)

    class RunnerUp(TypedDict):
        moe_backend: str | None
        attention_backend: str
        fa_version: int | None
        engine_args: dict[str, Any]


FAILED_OUTCOMES = frozenset(o.value for o in Outcome if o.failed)
EVIDENCE_RANK = {"measured": 3, "reported": 2, "predicted": 1}


@dataclass(frozen=True)
class EvidenceCell:
    """One cell (schema fields; ``evidence`` always set) and what the recommender knows about it."""

    cell: dict[str, Any]
    source: str  # the file it was read from (``probe/data/reports.json`` for field reports)
    vllm: str | None  # the vLLM version the cell speaks of (for spelling the flags)
    gpu_name: str | None = None  # the GPU name of its matrix's provenance
    gpu_count: int | None = None  # how many GPUs its matrix's run had (provenance.gpu.count)
    image_versions: dict[str, Any] | None = None  # the image a measured cell ran in (provenance.versions)
    #: a failure of another image that lacked this module: set aside (``needs`` says it), not a failure here
    lacked: str | None = None

    def get(self, key: str, default: Any = None) -> Any:
        return self.cell.get(key, default)

    @property
    def evidence(self) -> str:
        return str(self.cell["evidence"])

    @property
    def kind(self) -> Any:
        return self.cell.get("kind")

    @property
    def ok(self) -> bool:
        return self.cell.get("outcome") == "ok"

    @property
    def failed(self) -> bool:
        return self.lacked is None and self.cell.get("outcome") in FAILED_OUTCOMES

    @property
    def rank(self) -> int:
        return EVIDENCE_RANK[self.evidence]


def unique_cells(cells: list[EvidenceCell]) -> list[EvidenceCell]:
    """The cells without repeats (the same cell of the same file), in order."""
    seen: set[tuple[str, str]] = set()
    out = []
    for c in cells:
        k = (c.source, str(c.cell.get("id")))
        if k not in seen:
            seen.add(k)
            out.append(c)
    return out


@dataclass(frozen=True)
class LoadedEvidence:
    cells: list[EvidenceCell]
    files: list[str]  # the matrix files read (the answer's ``matrices``)


@dataclass(frozen=True)
class Deployment:
    """How the model is served, beyond the GPU: what vLLM's checks and the field reports depend on."""

    kv_cache_dtype: str = "auto"  # vLLM's --kv-cache-dtype
    ep: bool = False  # --enable-expert-parallel
    dp: int = 1  # --data-parallel-size
    speculative: str | None = None  # the --speculative-config method (mtp, eagle3, ngram …)
    enforce_eager: bool = False  # --enforce-eager: no CUDA graphs

    @property
    def default(self) -> bool:
        return self == Deployment()


@dataclass(frozen=True)
class Request:
    """The question: this model, in this quant, at this TP (None: any), on this GPU, served as
    ``deploy`` says, with the one vLLM version the answer speaks for."""

    profile: ModelProfile
    quant: str
    tp: int | None
    sm: int
    name_keys: frozenset[str]
    vllm: str | None = None
    deploy: Deployment = field(default_factory=Deployment)

    @classmethod
    def of(
        cls,
        profile: ModelProfile,
        quant: str,
        tp: int | None,
        sm: int,
        vllm: str | None = None,
        deploy: Deployment | None = None,
    ) -> Request:
        keys = frozenset(norm(n) for n in profile.names())
        return cls(profile, quant, tp, sm, keys, vllm, deploy or Deployment())

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def experts(self) -> int | None:
        return self.profile.moe.experts if self.profile.moe else None

    @property
    def moe_hidden(self) -> int:
        """The width the expert GEMMs run at (LatentMoE: the latent size)."""
        moe = self.profile.moe
        return (moe.latent_size if moe else None) or self.profile.hidden_size

    @property
    def intermediate(self) -> int | None:
        return self.profile.moe.intermediate if self.profile.moe else None

    @property
    def moe_layers(self) -> int:
        moe = self.profile.moe
        return (moe.moe_layers or self.profile.num_hidden_layers) if moe else 0

    @property
    def mla(self) -> bool:
        return self.profile.mla is not None

    @property
    def least_tp(self) -> int:
        """The TP vLLM's checks are read at: ``--tp``, else the least the deployment runs at (expert
        parallelism on one data-parallel rank spans TP ranks: 2; otherwise 1)."""
        if self.tp:
            return self.tp
        return 2 if self.deploy.ep and self.deploy.dp == 1 else 1

    def is_model(self, name: Any) -> bool:
        return isinstance(name, str) and norm(name) in self.name_keys


@dataclass(frozen=True)
class Choice:
    """One backend (and FA version) with the cells that say it works / fails at this shape."""

    backend: str
    fa_version: int | None
    ok_cells: list[EvidenceCell]
    bad_cells: list[EvidenceCell]
    ms: float | None  # best timing of the working cells (forward_ms_b1 / decode_ms)
    tps: float | None = None  # best tokens_per_s of end-to-end runs naming the backend
    basis: str = (
        "measured"  # the rung of the evidence ladder: measured / measured_nearest / predicted / reported
    )
    note: str = (
        ""  # how the evidence reaches this model (nearest shape, vLLM's check, a field report's scope)
    )


ArgsKey = tuple[tuple[str, str], ...]


def args_key(engine_args: Any) -> ArgsKey:
    """Engine arguments as a comparable key."""
    return tuple(sorted((str(k), str(v)) for k, v in (engine_args or {}).items()))


@dataclass(frozen=True)
class Pair:
    """A candidate answer: MoE backend x attention backend (+ FA version, engine args), scored."""

    moe: str | None
    attn: str
    fa: int | None
    args: dict[str, Any]
    score: float | None
    metric: str
    higher_better: bool
    cells: list[EvidenceCell]

    @property
    def key(self) -> tuple[str | None, str, int | None, ArgsKey]:
        return self.moe, self.attn, self.fa, args_key(self.args)


@dataclass(frozen=True, order=True)
class PairRank:
    """The sort key of a pair: smaller is better, field by field."""

    last_resort: int  # 1: a backend vLLM only falls back to
    evidence: int  # minus the weakest role's best evidence rank
    clean: int  # -1 unless a best cell is degraded
    unscored: int  # 1 when there is no score
    score: float  # signed so that smaller is better
    moe_priority: int  # position in vLLM's own auto order
    attention_priority: int
    moe_name: str
    attention_name: str


@dataclass(frozen=True)
class Recommendation:
    """The answer (``to_dict()`` is the ``probe recommend --json`` document; docs/publish.md)."""

    model: str
    quant: str
    gpu: str
    gpu_name: str
    basis: str  # 'measured', 'predicted+reported', or 'measured+predicted' (halves on different rungs)
    moe_backend: str | None = None
    attention_backend: str | None = None
    fa_version: int | None = None
    #: what ``auto`` resolves to here (the measured engine's own log of its pick, else vLLM's checks);
    #: the backend itself when the answer names one; None: not known
    moe_backend_resolved: str | None = None
    attention_backend_resolved: str | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    vllm_version: str | None = None
    flags_for_vllm: str | None = None
    flags: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    evidence: list[EvidenceEntry] = field(default_factory=list)
    speed: Speed | None = None
    runner_up: RunnerUp | None = None
    halves: dict[str, HalfBasis] = field(
        default_factory=dict
    )  # 'moe' / 'attention' -> the chosen backend's evidence basis
    ruled_out: list[RuledOut] = field(default_factory=list)  # one per backend, with the reason
    needs: list[str] = field(default_factory=list)  # what the answer needs to work (packages, engine args)
    why_not: list[str] = field(default_factory=list)  # --why-not BACKEND: the evidence against it
    # a backend that works here but is not the answer's -> why its best pair ranked lower
    ranked_below: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    matrices: list[str] = field(default_factory=list)
    image: str | None = None  # the image the answer is for (--image / --python / --scan / this environment)

    @property
    def found(self) -> bool:
        return bool(self.attention_backend or self.moe_backend)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
