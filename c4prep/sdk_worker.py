"""Beam's SDK worker processes of ``--direct_running_mode=multi_processing``, started through this module
(`python -m c4prep.sdk_worker`), which gives the root logger a handler before Beam is imported.

Without Beam's ``gcp`` extra (google-apitools, which `pip install c4prep` leaves out), `import apache_beam` logs a
warning through `logging.warning`, which installs a stderr handler on a root logger that has none
(`logging.basicConfig`). Beam's worker (`sdk_worker_main`) then sets the root level to INFO, so its records, which
it sends to the runner over the Fn API, reached the terminal too: about 40 lines a run with 2 workers. With a
`NullHandler` on the root first they go to the runner alone, as where the extra is installed.
"""
from __future__ import annotations

import logging
import runpy
from contextlib import AbstractContextManager

BEAM_WORKER = "apache_beam.runners.worker.sdk_worker_main"
THIS_MODULE = "c4prep.sdk_worker"


def workers_started_here() -> AbstractContextManager[None]:
    """While the block runs, the FnApiRunner starts its ``multi_processing`` workers through this module."""
    from apache_beam.transforms.environments import SubprocessSDKEnvironment

    from c4prep.patches import replaced

    beams = SubprocessSDKEnvironment.from_command_string

    def from_command_string(command_string: str) -> SubprocessSDKEnvironment:
        return beams(command_string.replace(f"-m {BEAM_WORKER}", f"-m {THIS_MODULE}"))

    return replaced((SubprocessSDKEnvironment, "from_command_string", from_command_string))


if __name__ == "__main__":
    logging.getLogger().addHandler(logging.NullHandler())
    runpy.run_module(BEAM_WORKER, run_name="__main__", alter_sys=True)
