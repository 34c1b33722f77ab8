"""Everything a check may look at: the resolved env file, the checkout and the process environment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..scripts.render import flag_groups, passthrough_flags
from ..settings.validate import Config
from ..settings.variants import VARIANTS

#: seconds a probe of the job's python may take (imports of slime/SGLang/torch are slow)
PROBE_TIMEOUT = 300.0


@dataclass
class Context:
    """The inputs of every check.

    :param config: the resolved env file.
    :param repo: the toolkit checkout (templates/lib, python/, install_slime.sh).
    :param slime_flags: the flags after ``--`` on the command line.
    :param variant: the script bin/train would render (sync, async, eval).
    :param environ: the process environment the run would inherit.
    :param offline: skip the checks that need the network (AWS).
    """

    config: Config
    repo: Path
    slime_flags: list[str] = field(default_factory=list)
    variant: str = "sync"
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    offline: bool = False

    def value(self, name: str) -> Any:
        """The resolved value of an env-file key (``None`` when unset or unknown to this schema).

        :param name: the key.
        """
        return self.config.values.get(name)

    @property
    def job_python(self) -> str | None:
        """The python ``ray job submit`` runs: TOOLKIT_JOB_PYTHON, else python3 on PATH."""
        chosen = self.environ.get("TOOLKIT_JOB_PYTHON") or "python3"
        return shutil.which(chosen, path=self.environ.get("PATH"))

    def job_environ(self) -> dict[str, str]:
        """The environment of the job's python: ours plus the job's PYTHONPATH (as train.sh sets it)."""
        env = dict(self.environ)
        job_path = f"{self.value('MEGATRON_DIR')}:{self.repo / 'python'}"
        env["PYTHONPATH"] = job_path + (f":{env['PYTHONPATH']}" if env.get("PYTHONPATH") else "")
        return env

    def run_job_python(self, script: Path, *args: str) -> tuple[dict[str, Any] | None, str]:
        """Run a probe script with the job's python; its last stdout line is a JSON object.

        :param script: the probe (a file of this package, run as a script).
        :param args: its arguments.
        :returns: the decoded object (``None`` when the probe failed) and the error text.
        """
        python = self.job_python
        if python is None:
            return None, "python3 not found on PATH"
        try:
            done = subprocess.run(
                [python, str(script), *args],
                env=self.job_environ(),
                capture_output=True,
                text=True,
                timeout=PROBE_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, str(exc)
        lines = done.stdout.strip().splitlines()
        try:
            data = json.loads(lines[-1]) if lines else None
        except ValueError:
            data = None
        if not isinstance(data, dict):
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return None, f"{Path(python).name} {script.name} exited {done.returncode}: {tail}"
        return data, ""

    def command_line(self, model_args: list[str]) -> list[str]:
        """The slime flags of the final command line, in order (as train.sh passes them).

        Run-time flags are included in the form the script adds them (``--load`` only when
        SAVE_DIR holds a checkpoint, wandb only when WANDB_API_KEY is exported).

        :param model_args: MODEL_ARGS read from the model script.
        """
        chosen = VARIANTS[self.variant]
        run_dir = Path(str(self.value("SAVE_DIR"))).parent
        words = list(model_args)
        for _, lines in flag_groups(self.config, run_dir, chosen):
            for line in lines:
                words += line
        if self.environ.get("WANDB_API_KEY"):
            words += ["--use-wandb", "--wandb-group", "g", "--wandb-project", "p"]
        words += ["--load", str(self.value("SAVE_DIR"))]
        if self.value("CUDA_HOME"):
            words += ["--train-env-vars", "{}"]
        return words + passthrough_flags(self.config, self.slime_flags)
