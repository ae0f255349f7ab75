"""The request options that ``plan``, ``search``, ``simulate``, ``build`` and ``cost`` share, declared once.

:func:`shardplan.cli.common.request_options` adds them to a command.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["REQUEST_PARAMETERS"]

_KW = inspect.Parameter.KEYWORD_ONLY
REQUEST_PARAMETERS = [
    inspect.Parameter(
        "model",
        _KW,
        annotation=Annotated[
            str,
            typer.Option(
                "--model", "-m", help="Bundled model (meta-llama/Llama-3.1-70B, llama-3.1-70b) or config.json path."
            ),
        ],
    ),
    inspect.Parameter(
        "gpu",
        _KW,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option(
                "--gpu",
                "-g",
                help="GPU catalog name: H100 (default), H200, B200, A100, L40S, MI300X, A100-40GB, H100-PCIe, "
                "H20, GB200.",
            ),
        ],
    ),
    inspect.Parameter(
        "decode_gpu",
        _KW,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option(
                "--decode-gpu",
                help="Run the decode workers on this GPU type and the prefill workers on --gpu: split pools only, "
                "the KV cache priced over the network between them.",
            ),
        ],
    ),
    inspect.Parameter(
        "decode_gpus",
        _KW,
        default=None,
        annotation=Annotated[
            int | None,
            typer.Option(
                "--decode-gpus",
                help="With --decode-gpu: the most of the --gpus the decode pool may use (default: any share).",
            ),
        ],
    ),
    inspect.Parameter(
        "gpus",
        _KW,
        default=None,
        annotation=Annotated[
            int | None, typer.Option("--gpus", "-n", help="GPUs available (default with --cluster: all of it).")
        ],
    ),
    inspect.Parameter(
        "gpus_per_node",
        _KW,
        default=None,
        annotation=Annotated[
            int | None, typer.Option("--gpus-per-node", help="GPUs per node (default: the GPU's usual 8).")
        ],
    ),
    inspect.Parameter(
        "cluster",
        _KW,
        default=None,
        annotation=Annotated[
            Path | None,
            typer.Option(
                "--cluster",
                help="Cluster YAML (GPU, nodes, link figures: *_gb_per_s in GB/s, or with a unit such as 400Gbps); "
                "replaces --gpu.",
            ),
        ],
    ),
    inspect.Parameter(
        "isl",
        _KW,
        default=None,
        annotation=Annotated[int | None, typer.Option("--isl", help="Input (prompt) tokens [default: 2048, stated].")],
    ),
    inspect.Parameter(
        "osl",
        _KW,
        default=None,
        annotation=Annotated[int | None, typer.Option("--osl", help="Output tokens [default: 256, stated].")],
    ),
    inspect.Parameter(
        "isl_dist",
        _KW,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option(
                "--isl-dist",
                help="Prompt lengths drawn from a distribution: lognormal:mean=2048,cv=0.8[,low=L,high=H], "
                "uniform:256,4096 or fixed:2048; --isl defaults to its mean.",
            ),
        ],
    ),
    inspect.Parameter(
        "osl_dist",
        _KW,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option("--osl-dist", help="Output lengths drawn from a distribution (as --isl-dist); --osl "
                         "defaults to its mean."),
        ],
    ),
    inspect.Parameter(
        "workload",
        _KW,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option(
                "--workload",
                help="A request trace, one request a row: a CSV or JSON Lines file (input and output tokens, "
                "optional arrival time and prefix group) or a bundled trace (azure-code, azure-conv; see "
                "shardplan traces); --isl and --osl default to its means.",
            ),
        ],
    ),
    inspect.Parameter(
        "arrival",
        _KW,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option(
                "--arrival",
                help="How requests arrive: poisson (default), gamma:cv=3 (bursty), closed:N (N clients, each "
                "sending its next request when its last completes; N sequences in flight unless --batch), or "
                "trace (the --workload file's timestamps; its mean rate unless --rate).",
            ),
        ],
    ),
    inspect.Parameter(
        "batch",
        _KW,
        default=None,
        annotation=Annotated[
            int | None,
            typer.Option(
                "--batch",
                "-b",
                help="Fix the sequences in flight across the whole deployment (default: the search chooses).",
            ),
        ],
    ),
    inspect.Parameter(
        "prefill_batch",
        _KW,
        default=None,
        annotation=Annotated[
            int | None,
            typer.Option(
                "--prefill-batch", help="Static batching: prompts prefilled together (default: the whole batch)."
            ),
        ],
    ),
    inspect.Parameter(
        "batching",
        _KW,
        default="continuous",
        annotation=Annotated[
            str,
            typer.Option(
                "--batching",
                help="continuous (steps mix decode tokens with chunks of new prompts) or static (one batch "
                "prefilled, then decoded).",
            ),
        ],
    ),
    inspect.Parameter(
        "rate",
        _KW,
        default=None,
        annotation=Annotated[
            float | None,
            typer.Option("--rate", help="Requests/s to serve: plan the fewest GPUs that serve it under the targets."),
        ],
    ),
    inspect.Parameter(
        "gpu_memory_utilization",
        _KW,
        default=0.9,
        annotation=Annotated[
            float,
            typer.Option(
                "--gpu-memory-utilization", help="Share of each GPU's memory the engine may use (0 to 1, as vLLM's)."
            ),
        ],
    ),
    inspect.Parameter(
        "max_batched_tokens",
        _KW,
        default=8192,
        annotation=Annotated[
            int,
            typer.Option("--max-batched-tokens", help="Tokens one continuous-batching step carries at most."),
        ],
    ),
    inspect.Parameter(
        "ttft_ms",
        _KW,
        default=None,
        annotation=Annotated[float | None, typer.Option("--ttft-ms", help="Target time to first token, ms.")],
    ),
    inspect.Parameter(
        "tpot_ms",
        _KW,
        default=None,
        annotation=Annotated[float | None, typer.Option("--tpot-ms", help="Target time per output token, ms.")],
    ),
    inspect.Parameter(
        "slo_percentile",
        _KW,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option(
                "--slo-percentile",
                help="What --ttft-ms and --tpot-ms bound: mean (default), or 50, 90, 95, 99, a percentile over "
                "requests, judged by simulating the best candidates under the workload.",
            ),
        ],
    ),
    inspect.Parameter(
        "objective",
        _KW,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option(
                "--objective",
                help="latency, throughput or goodput (throughput under the targets); default: throughput when "
                "targets or a rate are given, else latency.",
            ),
        ],
    ),
    inspect.Parameter(
        "engine",
        _KW,
        default="vllm",
        annotation=Annotated[
            str,
            typer.Option(
                "--engine", help="Serving engine priced: vllm, sglang or trtllm (its measured kernels and "
                "collectives); plan also takes auto (every engine) or a comma list, planning each and answering "
                "with the best."
            ),
        ],
    ),
    inspect.Parameter(
        "weight_dtype",
        _KW,
        default=None,
        annotation=Annotated[
            str | None, typer.Option("--weight-dtype", help="Override the weight format: bf16, fp8, fp4.")
        ],
    ),
    inspect.Parameter(
        "kv_dtype",
        _KW,
        default=None,
        annotation=Annotated[str | None, typer.Option("--kv-dtype", help="Override the KV-cache format: bf16, fp8.")],
    ),
    inspect.Parameter(
        "attention_dtype",
        _KW,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option(
                "--attention-dtype",
                help="Format attention multiplies in: bf16 (default) or fp8, where the engine runs FP8 attention "
                "kernels over an FP8 KV cache (FlashMLA's FP8 decode kernel, TensorRT-LLM's FP8 context FMHA).",
            ),
        ],
    ),
    inspect.Parameter(
        "weight_dtype_for",
        _KW,
        default=None,
        annotation=Annotated[
            list[str] | None,
            typer.Option(
                "--weight-dtype-for",
                help="Repeatable PART=FORMAT: a part whose weights the checkpoint stores apart from --weight-dtype "
                "(parts: attention, dense_ffn, shared_experts, experts, router, lm_head, mtp), e.g. "
                "attention=bf16,mtp=bf16 for NVIDIA's FP4 DeepSeek-R1, or experts=fp4 for FP4 experts only.",
            ),
        ],
    ),
    inspect.Parameter(
        "constraint",
        _KW,
        default=None,
        annotation=Annotated[
            list[str] | None,
            typer.Option(
                "--constraint",
                "-C",
                help="Repeatable: tp<=8, pp=1, ep>=8, sp=off, decode:tp=8, tp-in-node, ep-in-node, pp-across-nodes, "
                "pow2, colocated, disaggregated, gpus-per-replica=8, engine=vllm.",
            ),
        ],
    ),
    inspect.Parameter(
        "spec",
        _KW,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option(
                "--spec",
                help="Speculative decoding: mtp:K (the model's MTP layers), eagle:K (an EAGLE-3 head: the one "
                "bundled for the model, else one with a full-vocabulary LM head), eagle:HEAD:K (the head's "
                "config.json or folder) or draft:MODEL:K (a draft model), K draft tokens per step; needs "
                "--spec-accept.",
            ),
        ],
    ),
    inspect.Parameter(
        "spec_accept",
        _KW,
        default=None,
        annotation=Annotated[
            float | None,
            typer.Option(
                "--spec-accept",
                help="Mean accepted draft tokens per step, 0 to K, as measured: the engine's mean acceptance "
                "length minus one (vLLM, SGLang). Required with --spec; never assumed.",
            ),
        ],
    ),
    inspect.Parameter(
        "prefix_hit",
        _KW,
        default=None,
        annotation=Annotated[
            float | None,
            typer.Option(
                "--prefix-hit",
                help="Share of prompt tokens found in the prefix cache (0 to below 1), e.g. 0.7 when a shared system "
                "prompt is 70% of each prompt: prefill computes only the rest.",
            ),
        ],
    ),
]
