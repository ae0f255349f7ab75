"""Shell text for a plan's servers: every value quoted, one line per process, grouped by node."""

from __future__ import annotations

import math
import re
import shlex

from shardplan.tools.launch.servers import FlagValue, Server, Target

__all__ = ["shell_word", "flag_words", "instance_lines", "script"]


_PLACEHOLDER = re.compile(r"\$\{[A-Z_][A-Z0-9_]*\}(:[0-9]+)?")
"""A value the person running the command fills in (``${HEAD_IP}:5000``); nothing else may expand."""


def shell_word(text: str) -> str:
    """``text`` as one shell word that the shell reads back literally (a model named ``x$(touch f)`` or a
    path with spaces stays one inert word); only an exact ``${VAR}`` placeholder stays expandable.

    >>> shell_word("meta-llama/Llama-3.1-8B"), shell_word("my models/x$(id)"), shell_word("${HEAD_IP}:5000")
    ('meta-llama/Llama-3.1-8B', "'my models/x$(id)'", '"${HEAD_IP}:5000"')
    """
    return f'"{text}"' if _PLACEHOLDER.fullmatch(text) else shlex.quote(text)


def flag_words(flags: dict[str, FlagValue]) -> list[str]:
    words: list[str] = []
    for name, value in flags.items():
        if value is True:
            words.append(name)
        elif value is not False:
            words += [name, shell_word(str(value))]
    return words


def instance_lines(target: Target, server: Server) -> list[tuple[int, str]]:
    """(node, line) for every process of ``server``: one per instance, or per node of a multi-node SGLang server.

    Records the first process's flags and environment on ``server``.
    """
    lines: list[tuple[int, str]] = []
    per_instance = server.gpus
    base_flags, base_env = dict(server.flags), dict(server.env)
    for index in range(server.instances):
        start = server.starts[index]
        node = start // target.gpus_per_node
        env: dict[str, str] = {}
        if per_instance < target.gpus_per_node:
            local = [(start + g) % target.gpus_per_node for g in range(per_instance)]
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in local)
        env.update(base_env)
        if "VLLM_NIXL_SIDE_CHANNEL_PORT" in env:
            env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"]) + index)
        flags = dict(base_flags)
        if server.port is not None:
            flags["--port"] = server.port + index
        prefix = [f"{key}={shell_word(value)}" for key, value in env.items()]
        nodes = math.ceil(per_instance / target.gpus_per_node) if server.multinode == "sglang" else 1
        for rank in range(nodes):
            if server.multinode == "sglang":
                flags.update({"--nnodes": nodes, "--node-rank": rank, "--dist-init-addr": "${HEAD_IP}:5000"})
            if index == 0 and rank == 0:
                server.flags, server.env = dict(flags), dict(env)
            lines.append((node + rank, " ".join(prefix + [shell_word(w) for w in server.program] + flag_words(flags))))
    return lines


def script(per_node: dict[int, list[str]], files: dict[str, str], labels: dict[int, str] | None = None) -> str:
    """The shell text: config files, then each node's lines under a ``# node N`` comment (with ``labels[N]``, what
    the node holds, where given)."""
    parts = [f"cat > {shell_word(name)} <<'EOF'\n{text}EOF" for name, text in files.items()]
    several_nodes = len(per_node) > 1
    labels = labels or {}
    for node in sorted(per_node):
        lines = per_node[node]
        if several_nodes:
            parts.append(f"# node {node}" + (f" ({labels[node]})" if node in labels else ""))
        if len(lines) > 1:
            parts.extend(f"{line} &" for line in lines)
            parts.append("wait")
        else:
            parts.extend(lines)
    return "\n".join(parts)
