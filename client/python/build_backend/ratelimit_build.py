"""PEP 517 build backend of the ratelimit client, written with the standard library only.

It generates the gRPC stubs of proto/ratelimit/v1/ratelimit.proto into
ratelimit_client/_pb/ (with grpc_tools.protoc when importable, else `protoc` with
`grpc_python_plugin`, found on PATH or through $PROTOC and $GRPC_PYTHON_PLUGIN) and writes the
wheel. The proto is taken from the repository (../../proto, when building from a checkout) or
from proto/ inside this folder (an sdist carries it there).
"""
import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

NAME = "ratelimit_client"
DIST = "ratelimit-client"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_REL = os.path.join("ratelimit", "v1", "ratelimit.proto")
PB_DIR = "_pb"


def _project():
    """Version, summary, licence, python requirement, dependencies and extras, from
    pyproject.toml.

    pyproject.toml is read with a small line parser (tomllib is Python 3.11+); it handles the
    flat string keys and one-line arrays this project's file uses."""
    with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    section = None
    out = {"extras": {}}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^\[(.+)\]$", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r'^([\w-]+)\s*=\s*(.*)$', line)
        if not m:
            continue
        key, value = m.group(1), m.group(2)
        if section == "project":
            if value.startswith('"'):
                out[key] = value.strip('"')
            elif value.startswith("["):
                out[key] = re.findall(r'"([^"]*)"', value)
        elif section == "project.optional-dependencies":
            out["extras"][key] = re.findall(r'"([^"]*)"', value)
    return out


def _license_files():
    """[(name, path)] of the project's license-files: each is taken from this folder (an sdist
    carries it there) or else from the repository's root (a checkout). A missing one fails
    the build: a package must not ship without its licence."""
    out = []
    for name in _project().get("license-files", []):
        for root in (HERE, os.path.join(HERE, "..", "..")):
            path = os.path.join(root, name)
            if os.path.isfile(path):
                out.append((name, os.path.abspath(path)))
                break
        else:
            raise RuntimeError("ratelimit-client: licence file %s not found in %s nor in the "
                               "repository's root" % (name, HERE))
    return out


def _metadata():
    p = _project()
    lines = [
        "Metadata-Version: 2.4",
        "Name: " + DIST,
        "Version: " + p["version"],
        "Summary: " + p["description"],
        "License-Expression: " + p["license"],
        "Requires-Python: " + p["requires-python"],
    ]
    lines += ["License-File: " + name for name, _ in _license_files()]
    lines += ["Requires-Dist: " + d for d in p.get("dependencies", [])]
    for extra, deps in sorted(p["extras"].items()):
        lines.append("Provides-Extra: " + extra)
        lines += ['Requires-Dist: %s ; extra == "%s"' % (d, extra) for d in deps]
    readme = os.path.join(HERE, "README.md")
    lines.append("Description-Content-Type: text/markdown")
    body = ""
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _version():
    return _project()["version"]


def _proto_root():
    for root in (os.path.join(HERE, "proto"), os.path.join(HERE, "..", "..", "proto")):
        if os.path.isfile(os.path.join(root, PROTO_REL)):
            return os.path.abspath(root)
    raise RuntimeError("ratelimit-client: %s not found in %s/proto nor in the repository's "
                       "proto/ folder" % (PROTO_REL, HERE))


def _protoc_command(proto_root, out):
    """The command generating the Python messages, type stubs and gRPC stubs into `out`."""
    args = ["-I" + proto_root, "--python_out=" + out, "--pyi_out=" + out]
    try:
        import grpc_tools.protoc  # grpcio-tools bundles protoc and the well-known types
        include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        return [sys.executable, "-m", "grpc_tools.protoc", "-I" + include] + args + [
            "--grpc_python_out=" + out, PROTO_REL]
    except ImportError:
        pass
    protoc = os.environ.get("PROTOC") or shutil.which("protoc")
    plugin = os.environ.get("GRPC_PYTHON_PLUGIN") or shutil.which("grpc_python_plugin")
    if not protoc or not plugin:
        raise RuntimeError("ratelimit-client: generating the gRPC stubs needs grpcio-tools, or "
                           "protoc and grpc_python_plugin (Debian: protobuf-compiler, "
                           "protobuf-compiler-grpc); set $PROTOC / $GRPC_PYTHON_PLUGIN if they "
                           "are not on PATH")
    return [protoc] + args + ["--grpc_out=" + out, "--plugin=protoc-gen-grpc=" + plugin,
                              PROTO_REL]


def generate_stubs(dest):
    """Writes the generated modules into `dest` (a package directory, created)."""
    proto_root = _proto_root()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(_protoc_command(proto_root, tmp), check=True)
        gen = os.path.join(tmp, "ratelimit", "v1")
        os.makedirs(dest, exist_ok=True)
        for name in ("ratelimit_pb2.py", "ratelimit_pb2.pyi", "ratelimit_pb2_grpc.py"):
            with open(os.path.join(gen, name), encoding="utf-8") as f:
                text = f.read()
            # The generated service module imports its messages by the proto's package path;
            # inside this package they are a sibling module.
            text = text.replace("from ratelimit.v1 import ratelimit_pb2",
                                "from . import ratelimit_pb2")
            with open(os.path.join(dest, name), "w", encoding="utf-8") as f:
                f.write(text)
        with open(os.path.join(dest, "__init__.py"), "w", encoding="utf-8") as f:
            f.write('"""Generated from proto/ratelimit/v1/ratelimit.proto at build time."""\n')


def _tree_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith((".pyc", ".pyo")):
                yield os.path.join(dirpath, name)


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def _write_wheel(wheel_directory, files, tag="py3-none-any"):
    """files: [(arcname, bytes)]; returns the wheel's file name."""
    version = _version()
    distinfo = "%s-%s.dist-info" % (NAME, version)
    licences = []
    for name, path in _license_files():
        with open(path, "rb") as f:
            licences.append((distinfo + "/licenses/" + name, f.read()))
    files = list(files) + licences + [
        (distinfo + "/METADATA", _metadata().encode()),
        (distinfo + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: ratelimit_build\n"
                               "Root-Is-Purelib: true\nTag: %s\n" % tag).encode()),
        (distinfo + "/top_level.txt", (NAME + "\n").encode()),
    ]
    record = [_record_line(a, d) for a, d in files] + [distinfo + "/RECORD,,"]
    files.append((distinfo + "/RECORD", ("\n".join(record) + "\n").encode()))
    filename = "%s-%s-%s.whl" % (NAME, version, tag)
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w",
                         zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in files:
            zf.writestr(arcname, data)
    return filename


# PEP 517 hooks.

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    src = os.path.join(HERE, "src", NAME)
    files = []
    for path in _tree_files(src):
        rel = os.path.relpath(path, src)
        if rel.split(os.sep)[0] == PB_DIR:
            continue  # stubs of an editable install; regenerated below
        with open(path, "rb") as f:
            files.append((NAME + "/" + rel.replace(os.sep, "/"), f.read()))
    with tempfile.TemporaryDirectory() as tmp:
        generate_stubs(os.path.join(tmp, PB_DIR))
        for path in _tree_files(os.path.join(tmp, PB_DIR)):
            with open(path, "rb") as f:
                files.append((NAME + "/" + PB_DIR + "/" + os.path.basename(path), f.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """An editable install: the stubs are generated into src/ratelimit_client/_pb and a .pth
    file puts src/ on sys.path."""
    generate_stubs(os.path.join(HERE, "src", NAME, PB_DIR))
    pth = (os.path.join(HERE, "src") + "\n").encode()
    return _write_wheel(wheel_directory, [("__editable__.%s.pth" % NAME, pth)])


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    filename = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for rel in ("pyproject.toml", "README.md"):
            tar.add(os.path.join(HERE, rel), base + "/" + rel)
        for name, path in _license_files():
            tar.add(path, base + "/" + name)
        for top in ("build_backend", "src"):
            for path in _tree_files(os.path.join(HERE, top)):
                rel = os.path.relpath(path, HERE)
                if PB_DIR in rel.split(os.sep):
                    continue
                tar.add(path, base + "/" + rel.replace(os.sep, "/"))
        tar.add(os.path.join(_proto_root(), PROTO_REL), base + "/proto/" + PROTO_REL)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return filename
