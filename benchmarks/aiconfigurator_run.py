"""Running AIConfigurator: installed into a virtualenv of its own, run as a subprocess with a timeout; what it
prints and saves is read by :mod:`aiconfigurator_cli`.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from aiconfigurator_cli import (
    AIC_VERSION,
    SYSTEMS,
    AicError,
    Deployment,
    Estimate,
    SearchResult,
    best_deployment,
    estimate_args,
    parse_error,
    parse_estimate,
    parse_search_space,
)

__all__ = ["ensure_aiconfigurator", "estimate_command", "run_command", "run_default"]


def ensure_aiconfigurator(venv_dir: Path, timeout_s: float = 1200) -> Path:
    """The ``aiconfigurator`` executable of ``venv_dir``, installing AIConfigurator there when missing.

    Raises ``AicError`` with the reason when it cannot be installed (no network, unsupported platform).
    """
    executable = venv_dir / "bin" / "aiconfigurator"
    if executable.exists():
        return executable
    try:
        venv.EnvBuilder(with_pip=True, clear=False).create(venv_dir)
        subprocess.run(
            [str(venv_dir / "bin" / "python"), "-m", "pip", "install", "-q", f"aiconfigurator=={AIC_VERSION}"],
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.CalledProcessError as error:
        raise AicError(f"pip could not install aiconfigurator=={AIC_VERSION}: {parse_error(error.stderr)}") from error
    except (OSError, subprocess.TimeoutExpired) as error:
        raise AicError(f"could not install aiconfigurator=={AIC_VERSION} into {venv_dir}: {error}") from error
    if not executable.exists():
        raise AicError(f"aiconfigurator=={AIC_VERSION} installed no 'aiconfigurator' command in {venv_dir}")
    return executable


def _run(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as error:
        raise AicError(f"AIConfigurator did not finish within {timeout_s:.0f} s") from error


def _common(model: str, gpu: str, isl: int, osl: int, backend: str = "vllm") -> list[str]:
    system = SYSTEMS.get(gpu)
    if system is None:
        raise AicError(f"AIConfigurator has no system for GPU {gpu!r} (known: {', '.join(SYSTEMS)})")
    return ["--model", model, "--system", system, "--backend", backend, "--isl", str(isl), "--osl", str(osl)]


def run_default(
    executable: Path,
    model: str,
    gpu: str,
    total_gpus: int,
    isl: int,
    osl: int,
    ttft_ms: float,
    tpot_ms: float,
    timeout_s: float = 900,
) -> SearchResult:
    """``aiconfigurator cli default`` (vLLM backend, agg and disagg) on the request; its best deployment."""
    with tempfile.TemporaryDirectory(prefix="aic-default-") as save_dir:
        command = [str(executable), "cli", "default", *_common(model, gpu, isl, osl)]
        command += ["--total-gpus", str(total_gpus), "--ttft", str(ttft_ms), "--tpot", str(tpot_ms)]
        command += ["--no-color", "--save-dir", save_dir]
        started = time.perf_counter()
        done = _run(command, timeout_s)
        wall = time.perf_counter() - started
        texts: dict[str, str] = {}
        space: dict[str, dict[str, list[int]]] = {}
        for mode in ("agg", "disagg"):
            for path in Path(save_dir).rglob(f"{mode}/best_config_topn.csv"):
                texts[mode] = path.read_text()
            for path in Path(save_dir).rglob(f"{mode}/exp_config.yaml"):
                space.update(parse_search_space(path.read_text()))
        if not texts:
            reason = parse_error(done.stdout + "\n" + done.stderr) if done.returncode else "no result files"
            raise AicError(f"cli default gave no configuration (exit {done.returncode}): {reason}")
    result = best_deployment(texts.get("agg"), texts.get("disagg"), total_gpus)
    return replace(result, space=space, wall_s=wall)


def estimate_command(
    executable: Path | str,
    model: str,
    gpu: str,
    isl: int,
    osl: int,
    deployment: Deployment,
    moe: bool,
    *,
    static: bool = False,
    backend: str = "vllm",
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``aiconfigurator cli estimate`` command line for one deployment (``extra``: further options, such
    as ``--nextn`` or ``--prefix``)."""
    common = _common(model, gpu, isl, osl, backend)
    return [str(executable), "cli", "estimate", *common, *estimate_args(deployment, moe, static), *extra, "--no-color"]


def run_command(command: list[str], timeout_s: float = 300) -> Estimate:
    """Run an ``aiconfigurator cli estimate`` command line and read its summary box."""
    done = _run(command, timeout_s)
    return parse_estimate(done.stdout, done.stderr)


if __name__ == "__main__":  # a quick manual check: python benchmarks/aiconfigurator_run.py VENV_DIR
    print(ensure_aiconfigurator(Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/.aic-venv")))
