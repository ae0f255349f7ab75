"""Number formats in a request: the weights' and the KV cache's ("fp8 kv cache", "FP4 weights", "bf16"), and a
format ruled out ("no fp8"), which sets nothing."""

from __future__ import annotations

import re

from shardplan.agent.parse.text import Findings, Scan
from shardplan.contracts.common import DType

__all__ = ["read_dtypes"]

_DTYPES: dict[str, DType] = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "fp8": "fp8",
    "float8": "fp8",
    "e4m3": "fp8",
    "int8": "int8",
    "w8a8": "int8",
    "fp4": "fp4",
    "nvfp4": "fp4",
    "w8a8 fp8": "fp8",
    "w8a8-fp8": "fp8",
    "mxfp4": "fp4",
    "fp32": "fp32",
    "float32": "fp32",
}
_DT = "(?P<dt>" + "|".join(sorted(_DTYPES, key=len, reverse=True)) + ")"
_KV = r"(?:kv(?:[\s_-]*cache)?(?:[\s_-]*dtype)?|cache)"
_KV_DTYPES = (
    re.compile(rf"(?<![\w#]){_DT}[\s-]*kv(?:[\s-]*cache)?"),
    re.compile(rf"(?<![\w#]){_KV}(?:\s+(?:dtype|precision|format))?\s*(?:in|at|as|of|=|:|to)?\s*{_DT}(?:_e[45]m[23])?(?![\w])"),
    re.compile(rf"(?<![\w#]){_KV}\s+(?:must|should|has\s+to|needs?\s+to|will)\s+(?:stay|be|remain|keep)\s+(?:in\s+)?{_DT}"
               r"(?![\w])"),
)
"""The KV cache's format: "fp8 kv cache", "kv cache in fp8", "cache bf16", "kv_cache_dtype=fp8_e5m2", "the kv cache
must stay bf16"."""
_KV_8_BIT = re.compile(r"(?<![\w#])8[\s-]*bit[\s-]+kv(?:[\s-]*cache)?")
"""An 8-bit KV cache: FP8, the engines' 8-bit cache on the GPUs planned."""
_WEIGHT_DTYPE = re.compile(rf"(?<![\w#]){_DT}(?![\w])")
_NOT_DTYPE = re.compile(
    rf"(?<![\w#])(?:no|not|without|avoid(?:ing)?|don'?t\s+(?:use|want)|do\s+not\s+use|never)\s+(?:in\s+|any\s+)?{_DT}"
    rf"(?:[\s-]*(?:{_KV}|weights?|quanti[sz]ation|quanti[sz]ed))?(?![\w])"
)
"""A format ruled out ("no fp8", "not FP8", "without fp8 quantization"): nothing is set from it."""


def read_dtypes(scan: Scan, found: Findings) -> None:
    """Formats: "fp8 kv cache" / "kv cache in fp8" set the KV cache; any other "fp8", "FP4 weights", "bf16"
    sets the weights."""
    for match in scan.take(_NOT_DTYPE):
        found.notes.append(f"Read '{match.group().strip()}' as ruling that format out; none is set from it (name the "
                           "one to use, e.g. 'bf16 weights', where the model's own is the one ruled out).")
    for match in scan.take(_KV_8_BIT):
        found.add("kv_dtype", "fp8", match.group())
    for name, pattern in (*(("kv_dtype", kv) for kv in _KV_DTYPES), ("weight_dtype", _WEIGHT_DTYPE)):
        for match in scan.take(pattern):
            found.add(name, _DTYPES[match.group("dt")], match.group())
    for match in scan.take(re.compile(r"(?<![\w#])(?:int4|4[\s-]*bit|awq|gptq)(?![\w])")):
        found.notes.append(f"'{match.group()}' is not a supported format; the formats are {', '.join(_DTYPES)}.")
