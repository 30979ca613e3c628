"""examples/deploy: the systemd unit, the Dockerfile and the Kubernetes manifests the Deploy guide
shows. Each runs `cronbase worker` with options that exist, and leaves the grace period room
before its tool's SIGKILL, so a deploy hands running jobs back instead of losing an attempt."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.integration.doc_blocks import check_command

DEPLOY = Path(__file__).resolve().parents[2] / "examples" / "deploy"
# What the worker needs after its grace period to hand back and write what is pending.
MARGIN = 15


def grace(command: list[str]) -> int:
    assert command[:2] == ["cronbase", "worker"], command
    check_command(shlex.join(command), "examples/deploy")
    return int(command[command.index("--shutdown-grace") + 1])


def test_systemd_unit_verifies_and_leaves_the_grace_room(tmp_path: Path) -> None:
    unit = (DEPLOY / "cronbase-worker.service").read_text("utf-8")
    (exec_start,) = re.findall(r"^ExecStart=(.*)$", unit, re.MULTILINE)
    program, *args = shlex.split(exec_start)
    assert grace(["cronbase", *args]) + MARGIN <= int(
        re.findall(r"^TimeoutStopSec=(\d+)$", unit, re.MULTILINE)[0]
    )
    # systemd's own check of the unit, with the program pointed at this venv's cronbase.
    local = tmp_path / "cronbase-worker.service"
    local.write_text(unit.replace(program, str(Path(sys.executable).with_name("cronbase"))))
    verify = shutil.which("systemd-analyze")
    assert verify is not None, "systemd-analyze (Debian's systemd) is needed to check the unit"
    result = subprocess.run(
        [verify, "verify", str(local)], capture_output=True, text=True, timeout=60, check=False
    )
    # It exits 0 on a line it ignores (an unknown setting, a bad value): anything said fails.
    assert result.returncode == 0, result.stderr
    assert not (result.stdout + result.stderr).strip(), result.stderr


def test_dockerfile_runs_cronbase_as_pid_1() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text("utf-8")
    (cmd,) = re.findall(r"^CMD (.*)$", dockerfile, re.MULTILINE)
    command = json.loads(cmd)  # the exec form: a shell form would take the SIGTERM itself
    stop_timeout = int(re.findall(r"--stop-timeout (\d+)", dockerfile)[0])
    assert grace(command) + MARGIN <= stop_timeout


def test_kubernetes_leaves_the_grace_room_and_migrates_first() -> None:
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text("utf-8")))
    kinds = {d["kind"]: d for d in documents}
    assert set(kinds) == {"Job", "Deployment"}
    (migrate,) = kinds["Job"]["spec"]["template"]["spec"]["containers"]
    assert migrate["command"] == ["cronbase", "migrate"]
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (worker,) = pod["containers"]
    assert grace(worker["command"]) + MARGIN <= pod["terminationGracePeriodSeconds"]
    processes = int(worker["command"][worker["command"].index("--processes") + 1])
    assert processes <= int(worker["resources"]["limits"]["cpu"])
