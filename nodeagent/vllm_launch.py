"""How the vLLM adapter starts a local vLLM server (unused when it attaches to a running one):
its own venv, the model folder scripts/install_vllm.sh converts, and the flags the node's
requests rely on (nodeagent/vllm_flags.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nodeagent.vllm_flags import TEMPLATES, UnknownModelFamily, family_of, launcher_args

# Where scripts/install_vllm.sh puts vLLM's venv and the converted model, from the repo root.
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_HOME = REPO_ROOT / ".vllm"


@dataclass(frozen=True, slots=True)
class VllmLaunch:
    """How to start a local vLLM server (unused when attaching to a running one)."""

    # vLLM's own Python (its separate venv); its pins never meet the project's.
    python: str = str(DEFAULT_HOME / "venv" / "bin" / "python")
    model_path: str = str(DEFAULT_HOME / "smollm2-135m-instruct")
    # The CPU build's KV cache size in host memory; ignored by GPU builds.
    kvcache_space_gib: int = 1
    # Cores vLLM's CPU build pins its OpenMP threads to.
    cpu_threads_bind: str = "0-1"
    max_num_seqs: int = 8
    # Skips torch.compile (and CUDA graphs on a GPU): the CPU build then starts in about a
    # minute instead of compiling for 5+ minutes on 2 busy cores, at some decode speed. Tests
    # and small CPU nodes want it; a GPU node does not.
    enforce_eager: bool = False
    # vLLM's compile and download caches stay inside the install folder, not in ~/.cache.
    cache_root: str = str(DEFAULT_HOME / "cache")
    # Takes the server's output; empty: .vllm/logs/vllm-PORT.log (one per server).
    log_path: str = ""
    extra_args: tuple[str, ...] = ()
    # Parses the model's tool calls; empty: its family's (nodeagent/vllm_flags.py), which a
    # model folder of no known family must name.
    tool_call_parser: str = ""
    # A chat template in place of the model's own; empty: its family's, if it needs one (the
    # bundled SmolLM2's own template drops a request's tools).
    chat_template: str = ""
    # Starts vLLM with VLLM_SERVER_DEV_MODE=1, so /server_info shows its scheduling policy to
    # the start check; it also opens vLLM's development endpoints (sleep, cache reset, RPC to
    # its workers) to whoever reaches its port, which listens on 127.0.0.1 only.
    server_info: bool = False

    def flag_args(self) -> list[str]:
        """The flags the nodeagent's requests rely on (vllm_flags), for this model."""
        family = None
        try:
            family = family_of(self.model_path)
        except UnknownModelFamily:
            if not self.tool_call_parser:
                raise
        parser = self.tool_call_parser or (family.tool_call_parser if family else "")
        template = self.chat_template
        if not template and family and family.chat_template:
            template = str(TEMPLATES / family.chat_template)
        return launcher_args(parser, template)

    def command(self, served_model: str, port: int, context_tokens: int) -> list[str]:
        return [
            self.python,
            "-m",
            # The `vllm` console script of the CPU wheel is broken; the module works.
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model_path,
            "--served-model-name",
            served_model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            str(context_tokens),
            "--max-num-seqs",
            str(self.max_num_seqs),
            *self.flag_args(),
            "--disable-uvicorn-access-log",
            *(["--enforce-eager"] if self.enforce_eager else []),
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            # Nothing may be downloaded at run time: the model folder is complete.
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(self.kvcache_space_gib),
            "VLLM_CPU_OMP_THREADS_BIND": self.cpu_threads_bind,
            "VLLM_CACHE_ROOT": self.cache_root,
            **({"VLLM_SERVER_DEV_MODE": "1"} if self.server_info else {}),
        }
