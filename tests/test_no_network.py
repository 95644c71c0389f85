"""Nothing reaches the network at run time: `run` (in memory and with worker processes), `vocab`, `tokenize` and a
few `train` steps, each in a fresh process whose every Python process (Beam's worker processes included, through
`sitecustomize`) carries an audit hook that records and refuses any socket connection or name lookup."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE_NAME = "CC-MAIN-2019-30-sample-a.warc.wet.gz"

# Installed in every Python process started with this folder on PYTHONPATH.
AUDIT_HOOK = '''
import os, sys

def _refuse_network(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "urllib.Request"):
        with open(os.environ["NETWORK_AUDIT_LOG"], "a") as log:
            log.write(f"{os.getpid()} {event} {args!r}\\n")
        raise ConnectionRefusedError(f"no network at run time ({event})")

sys.addaudithook(_refuse_network)
'''


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """Run a console script of the venv with the audit hook in every process; returns (run, audit log)."""
    hooks = tmp_path_factory.mktemp("audit")
    (hooks / "sitecustomize.py").write_text(AUDIT_HOOK)
    log = hooks / "network.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")]),
           "NETWORK_AUDIT_LOG": str(log)}
    scripts = Path(sys.executable).parent

    def run(command: str, *args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([str(scripts / command), *args], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    return run, log


def test_the_whole_chain_opens_no_connection(audited, webdata, tmp_path):
    run, log = audited
    documents, vocab, tokens = tmp_path / "docs", tmp_path / "vocab", tmp_path / "tokens"
    run("c4prep", "run", "--input", str(webdata / SAMPLE_NAME), "--output", str(documents), "--num-shards", "2")
    run("c4prep", "run", "--input", str(webdata / SAMPLE_NAME), "--output", str(tmp_path / "docs2"), "--num-shards",
        "2", "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    run("c4prep", "vocab", "--input", str(documents), "--output", str(vocab), "--vocab-size", "600")
    run("c4prep", "tokenize", "--input", str(documents), "--vocab", str(vocab), "--output", str(tokens))
    run("train", f"data.tokens={tokens}", f"output_dir={tmp_path / 'run'}", "model=t5_tiny",
        "objective.inputs_length=64", "objective.targets_length=16", "trainer.global_batch_size=4",
        "trainer.micro_batch_size=4", "trainer.max_steps=2", "trainer.progress=false", "trainer.tensorboard=false",
        "trainer.num_workers=0", "optimizer=adamw", "schedule=constant")
    assert (tmp_path / "run" / "checkpoints" / "latest").is_file()
    assert not log.exists(), log.read_text()


def test_the_audit_hook_sees_a_connection(audited, tmp_path):
    """The hook is really in the child process: a connection attempt there is recorded (and refused)."""
    run, log = audited
    with pytest.raises(AssertionError, match="no network at run time"):
        run("python", "-c", "import socket; socket.create_connection(('192.0.2.1', 80), timeout=1)")
    assert "socket.connect" in log.read_text() or "socket.getaddrinfo" in log.read_text()
    log.unlink()
