"""What one conformance case is, and what running it gives."""

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..verdicts.status import Status


@dataclass(frozen=True, order=True)
class Case:
    op: str
    dtype: str  # "float32": the name torch.<name> gives the dtype
    mode: str
    sample: int

    @property
    def key(self) -> str:
        return f"{self.op}|{self.dtype}|{self.mode}|{self.sample}"

    @classmethod
    def from_key(cls, key: str) -> "Case":
        op, dtype, mode, sample = key.split("|")
        return cls(op, dtype, mode, int(sample))


@dataclass
class CaseResult:
    case: Case
    status: Status  # status.py
    detail: str = ""  # the error, the mismatch, or why it was skipped
    max_abs: float | None = None
    max_rel: float | None = None
    mismatches: int | None = None
    time_s: float = 0.0
    arbitrated: bool = False  # float64 decided a low-precision mismatch
    manifest_reason: str = ""
    route: str = ""  # "native", "fallback" or "illegal-fallback" once judged (fallback.py); "" if it did not run
    fallback_ops: dict[str, int] = field(default_factory=dict)  # governed CPU fallback uses during the case

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(asdict(self.case))
        del data["case"]
        for key in ("max_abs", "max_rel"):  # strict JSON has no inf/nan: they travel as "inf", "nan"
            if isinstance(data[key], float) and not math.isfinite(data[key]):
                data[key] = str(data[key])
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CaseResult":
        data = dict(data)
        case = Case(data.pop("op"), data.pop("dtype"), data.pop("mode"), data.pop("sample"))
        data.pop("repro", None)
        data.pop("snippet", None)
        return cls(case=case, **data)
