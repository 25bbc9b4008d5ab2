"""The package as installed: stubs generated at build time, and an sdist that builds offline
on its own (it carries the proto)."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tarfile
import zipfile

import ratelimit_client
from ratelimit_client._pb import ratelimit_pb2, ratelimit_pb2_grpc

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_tests_run_against_the_installed_package_with_generated_stubs():
    installed = os.path.dirname(ratelimit_client.__file__)
    assert not installed.startswith(SOURCE), installed
    assert ratelimit_pb2.DESCRIPTOR.name == "ratelimit/v1/ratelimit.proto"
    assert hasattr(ratelimit_pb2_grpc, "RateLimitServiceStub")
    assert os.path.exists(os.path.join(installed, "py.typed"))
    assert os.path.exists(os.path.join(installed, "_pb", "ratelimit_pb2.pyi"))


def test_sdist_carries_the_proto_and_builds_a_wheel_offline(tmp_path):
    sys.path.insert(0, os.path.join(SOURCE, "build_backend"))
    try:
        import ratelimit_build
    finally:
        sys.path.pop(0)
    sdist = tmp_path / ratelimit_build.build_sdist(str(tmp_path))
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    base = sdist.name[:-len(".tar.gz")]
    assert base + "/proto/ratelimit/v1/ratelimit.proto" in names
    assert base + "/PKG-INFO" in names
    assert base + "/LICENSE" in names
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-index", "--no-deps", "-q",
                    "-w", str(wheels), str(sdist)], check=True)
    (wheel,) = wheels.iterdir()
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(base + ".dist-info/METADATA").decode()
        licence = zf.read(base + ".dist-info/licenses/LICENSE")
    assert "ratelimit_client/_pb/ratelimit_pb2_grpc.py" in names
    assert "Requires-Dist: grpcio>=1.51" in metadata
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()
    assert licence == _repository_licence()


def _repository_licence() -> bytes:
    with open(os.path.join(SOURCE, "..", "..", "LICENSE"), "rb") as f:
        return f.read()


def test_installed_package_declares_apache_2_and_carries_the_licence():
    """One licence for the repository and every package: Apache-2.0, its text in the wheel."""
    dist = importlib.metadata.distribution("ratelimit-client")
    assert dist.metadata["License-Expression"] == "Apache-2.0"
    assert dist.metadata["License"] is None  # the expression replaces the free-text field
    assert b"Apache License" in _repository_licence()
    assert dist.read_text("licenses/LICENSE").encode() == _repository_licence()
    with open(os.path.join(SOURCE, "pyproject.toml"), encoding="utf-8") as f:
        assert 'license = "Apache-2.0"' in f.read().splitlines()
