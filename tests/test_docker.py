"""Docker images (docker/): their pins agree with setup.py, and the commands they run work in a plain virtualenv.

No Docker engine runs here, so the Dockerfiles are parsed: each image's own RUN line installs a copy of the build
context (the checkout less .dockerignore) into a fresh virtualenv, offline, with the already-installed dependencies
visible through a .pth file; then the image's entrypoint (`train`) or the worker's imports run from that virtualenv.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "docker" / "beam-worker.Dockerfile"
TRAIN = REPO / "docker" / "train.Dockerfile"
SETUP = (REPO / "setup.py").read_text(encoding="utf-8")
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"

# Run inside the worker image's virtualenv: where c4prep was imported from and what its vendored data hold.
WORKER_CHECK = """
import json
import c4prep.pipelines
from c4prep.pipelines.c4_rules import load_badwords, load_realnews_domains
print(json.dumps({"package": c4prep.pipelines.__file__, "badwords": len(load_badwords()),
                  "realnews_domains": len(load_realnews_domains())}))
"""


def setup_value(pattern: str) -> str:
    """The first group of `pattern` in setup.py."""
    match = re.search(pattern, SETUP)
    assert match, f"setup.py has no {pattern!r}"
    return match.group(1)


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs in order, continuation lines joined, comments dropped."""
    text = dockerfile.read_text(encoding="utf-8").replace("\\\n", " ")
    pairs = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, _, arguments = line.strip().partition(" ")
            pairs.append((keyword.upper(), arguments.strip()))
    return pairs


def single(dockerfile: Path, keyword: str) -> str:
    """The arguments of the one `keyword` instruction in `dockerfile`."""
    found = [arguments for name, arguments in instructions(dockerfile) if name == keyword]
    assert len(found) == 1, f"{dockerfile.name}: expected one {keyword}, found {len(found)}"
    return found[0]


def build_args(dockerfile: Path) -> dict[str, str]:
    """ARG name -> default value."""
    return dict(arguments.split("=", 1) for name, arguments in instructions(dockerfile) if name == "ARG")


def expand_args(command: str, args: dict[str, str]) -> str:
    """`command` with every ${NAME} replaced by the ARG default, as the build's shell would see it."""
    return re.sub(r"\$\{(\w+)\}", lambda match: args[match.group(1)], command)


def install_arguments(dockerfile: Path, args: dict[str, str]) -> list[str]:
    """The arguments the RUN line passes to docker/install.sh (torch index URL, torch version) for these ARGs."""
    words = shlex.split(expand_args(single(dockerfile, "RUN"), args))
    script = next(i for i, word in enumerate(words) if word.endswith("/docker/install.sh"))
    return words[script + 1:script + 3]


def copy_context(destination: Path) -> None:
    """The Docker build context: the checkout less .dockerignore (each line one name, at any depth here)."""
    lines = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    names = [line.removeprefix("**/") for line in lines if line.strip() and not line.startswith("#")]
    assert all("/" not in name for name in names), f".dockerignore: keep one name a line, got {names}"
    shutil.copytree(REPO, destination, ignore=shutil.ignore_patterns(*names))


def plain_venv(path: Path) -> dict[str, str]:
    """A pip-less virtualenv at `path` that also sees this interpreter's packages (pip, setuptools, dependencies)
    after its own; returns the environment for commands run in it: its bin first on PATH, pip offline."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    own_site = Path(subprocess.run([path / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()"
                                    "['purelib'])"], check=True, capture_output=True, text=True).stdout.strip())
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (own_site / "test-venv.pth").write_text("\n".join(paths) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{path / 'bin'}{os.pathsep}{env.get('PATH', '')}", PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
               PIP_NO_BUILD_ISOLATION="0", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def run_image_install(dockerfile: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Run `dockerfile`'s RUN line, with its COPY target mapped to a copy of the context, in a fresh virtualenv;
    returns that virtualenv's site-packages and environment."""
    source, target = single(dockerfile, "COPY").split()
    assert source == ".", f"{dockerfile.name}: COPY the whole context (.), got {source}"
    context, venv = tmp_path / "context", tmp_path / "venv"
    copy_context(context)
    env = plain_venv(venv)
    command = single(dockerfile, "RUN").replace(target, str(context))
    result = subprocess.run(["sh", "-c", command], env={**env, **build_args(dockerfile)}, cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    site = next((venv / "lib").glob("python*/site-packages"))
    return site, env


@pytest.mark.parametrize("dockerfile", [WORKER, TRAIN], ids=lambda path: path.stem)
def test_base_image_python_satisfies_python_requires(dockerfile: Path) -> None:
    python = re.search(r"python:?(\d+\.\d+)", single(dockerfile, "FROM")).group(1)
    assert f"{python}.0" in SpecifierSet(setup_value(r'python_requires="([^"]+)"'))


def test_worker_is_the_official_beam_sdk_image_of_the_pinned_beam_version() -> None:
    match = re.fullmatch(r"apache/beam_python[\d.]+_sdk:(\S+)", single(WORKER, "FROM"))
    assert match and match.group(1) == setup_value(r'BEAM_VERSION = "([^"]+)"')


@pytest.mark.parametrize("dockerfile", [WORKER, TRAIN], ids=lambda path: path.stem)
def test_images_pin_setup_torch_and_install_the_cpu_build_by_default(dockerfile: Path) -> None:
    args = build_args(dockerfile)
    assert args["TORCH_VERSION"] == setup_value(r'"torch==([^"]+)"')
    assert [CPU_TORCH_INDEX, args["TORCH_VERSION"]] == install_arguments(dockerfile, args)


def test_train_image_selects_a_cuda_build_by_build_arg() -> None:
    args = {**build_args(TRAIN), "TORCH_VARIANT": "cu128"}
    assert install_arguments(TRAIN, args)[0] == "https://download.pytorch.org/whl/cu128"


def test_worker_install_puts_c4prep_and_its_data_in_a_plain_virtualenv(tmp_path: Path) -> None:
    from c4prep.pipelines.c4_rules import load_badwords, load_realnews_domains

    site, env = run_image_install(WORKER, tmp_path)
    for data_file in ("badwords/en.txt", "realnews/domain_to_allowed_subdomains.json"):
        assert (site / "c4prep" / "pipelines" / "data" / data_file).is_file(), data_file
    result = subprocess.run(["python", "-c", WORKER_CHECK], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    installed = json.loads(result.stdout)
    assert Path(installed["package"]).is_relative_to(site)
    assert installed["badwords"] == len(load_badwords()) > 300
    assert installed["realnews_domains"] == len(load_realnews_domains()) > 1000


def test_train_image_entrypoint_runs_train_from_the_installed_package(tmp_path: Path) -> None:
    _, env = run_image_install(TRAIN, tmp_path)
    entrypoint = json.loads(single(TRAIN, "ENTRYPOINT"))
    assert entrypoint == ["train"]
    assert Path(shutil.which(entrypoint[0], path=env["PATH"])).is_relative_to(tmp_path / "venv")
    result = subprocess.run([*entrypoint, "--help"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("usage: train")
    models = sorted(path.stem for path in (REPO / "configs" / "model").glob("*.yaml"))
    model_line = rf"^  model +{re.escape(', '.join(models))}$"
    assert models and re.search(model_line, result.stdout, re.MULTILINE), result.stdout
