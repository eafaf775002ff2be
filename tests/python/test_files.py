"""`sandbox.files`: reads, writes, listings and entry info with the unmodified e2b SDK.

The session daemon runs as root with no default user, so calls without `user=` act as root;
`user="user"` acts as E2B's template user and relative paths land in its home.
"""

import io
import os
import pwd
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
from e2b import FileType, InvalidArgumentException, SandboxException
from e2b.exceptions import FileNotFoundException, NotFoundException
from e2b.sandbox.filesystem.filesystem import WriteEntry


@pytest.fixture
def work(tmp_path):
    """A scratch directory every user may write in."""
    d = tmp_path / "work"
    d.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(d, 0o777)
    return d


@pytest.fixture
def user_home(e2b_user):
    """A fresh directory name under `user`'s home, removed afterwards."""
    name = f"hangar-e2e-{uuid.uuid4().hex[:8]}"
    yield name, Path(e2b_user.pw_dir) / name
    shutil.rmtree(Path(e2b_user.pw_dir) / name, ignore_errors=True)


def test_write_text_and_read_all_formats(sandbox, work):
    path = str(work / "hello.txt")
    info = sandbox.files.write(path, "héllo wörld\n")
    assert info.path == path
    assert info.name == "hello.txt"
    assert info.type == FileType.FILE
    assert (work / "hello.txt").read_bytes() == "héllo wörld\n".encode()

    assert sandbox.files.read(path) == "héllo wörld\n"
    data = sandbox.files.read(path, format="bytes")
    assert isinstance(data, bytearray)
    assert data == bytearray("héllo wörld\n".encode())
    with sandbox.files.read(path, format="stream") as stream:
        assert b"".join(stream) == "héllo wörld\n".encode()
    assert sandbox.files.read(path, gzip=True) == "héllo wörld\n"


def test_write_bytes_file_objects_and_iterables(sandbox, work):
    blob = bytes(range(256)) * 1000
    sandbox.files.write(str(work / "bytes.bin"), blob)
    assert (work / "bytes.bin").read_bytes() == blob

    # A binary file object goes as a streamed octet-stream upload.
    sandbox.files.write(str(work / "fileobj.bin"), io.BytesIO(blob))
    assert (work / "fileobj.bin").read_bytes() == blob
    # A text file object.
    sandbox.files.write(str(work / "text.txt"), io.StringIO("from a text stream"))
    assert (work / "text.txt").read_text() == "from a text stream"
    # An iterable of chunks (streamed, never buffered by the SDK).
    chunks = (bytes([i]) * 65536 for i in range(40))
    sandbox.files.write(str(work / "iter.bin"), chunks)
    assert (work / "iter.bin").read_bytes() == b"".join(bytes([i]) * 65536 for i in range(40))
    # A real file on disk, streamed.
    src = work / "src.bin"
    src.write_bytes(blob)
    with open(src, "rb") as f:
        sandbox.files.write(str(work / "copy.bin"), f)
    assert (work / "copy.bin").read_bytes() == blob

    # Forced multipart and forced octet-stream, and gzip.
    sandbox.files.write(str(work / "mp.txt"), "multipart", use_octet_stream=False)
    sandbox.files.write(str(work / "os.txt"), "octet", use_octet_stream=True)
    sandbox.files.write(str(work / "gz.txt"), "zipped " * 1000, gzip=True)
    assert (work / "mp.txt").read_text() == "multipart"
    assert (work / "os.txt").read_text() == "octet"
    assert (work / "gz.txt").read_text() == "zipped " * 1000

    # Overwrite; parents are created.
    sandbox.files.write(str(work / "a/b/c.txt"), "first")
    sandbox.files.write(str(work / "a/b/c.txt"), "second")
    assert sandbox.files.read(str(work / "a/b/c.txt")) == "second"


def test_write_files_many_at_once(sandbox, work):
    files = [WriteEntry(path=str(work / f"many/f{i}.txt"), data=f"content {i}") for i in range(5)]
    infos = sandbox.files.write_files(files)
    assert [i.path for i in infos] == [str(work / f"many/f{i}.txt") for i in range(5)]
    assert [i.name for i in infos] == [f"f{i}.txt" for i in range(5)]
    for i in range(5):
        assert sandbox.files.read(str(work / f"many/f{i}.txt")) == f"content {i}"
    assert sandbox.files.write_files([]) == []


def test_large_streamed_round_trip(sandbox, work):
    size = 48 * 1024 * 1024
    chunk = os.urandom(1 << 20)

    def gen():
        for i in range(size // len(chunk)):
            yield i.to_bytes(8, "little") + chunk[8:]

    sandbox.files.write(str(work / "large.bin"), gen())
    assert (work / "large.bin").stat().st_size == size
    got = 0
    with sandbox.files.read(str(work / "large.bin"), format="stream") as stream:
        buf = b""
        for piece in stream:
            buf += piece
            while len(buf) >= len(chunk):
                i = got // len(chunk)
                assert buf[: len(chunk)] == i.to_bytes(8, "little") + chunk[8:], f"MiB {i}"
                buf = buf[len(chunk):]
                got += len(chunk)
    assert got == size and buf == b""


def test_read_errors(sandbox, work):
    with pytest.raises(FileNotFoundException):
        sandbox.files.read(str(work / "missing.txt"))
    with pytest.raises(InvalidArgumentException):
        sandbox.files.read(str(work))


def test_get_info_file_dir_symlink(sandbox, work, e2b_user):
    sandbox.files.write(str(work / "info.txt"), "test")
    os.chmod(work / "info.txt", 0o644)
    # The daemon acts as `user` by default, so what the SDK writes is theirs.
    me = e2b_user.pw_name

    info = sandbox.files.get_info(str(work / "info.txt"))
    assert info.name == "info.txt"
    assert info.type == FileType.FILE
    assert info.path == str(work / "info.txt")
    assert info.size == 4
    assert info.mode == 0o644
    assert info.permissions == "-rw-r--r--"
    assert info.owner == me
    assert info.group
    assert info.symlink_target is None
    assert info.metadata is None
    mtime = datetime.fromtimestamp((work / "info.txt").stat().st_mtime, tz=timezone.utc)
    assert abs((info.modified_time - mtime).total_seconds()) < 1

    sandbox.files.make_dir(str(work / "d"))
    d = sandbox.files.get_info(str(work / "d"))
    assert d.type == FileType.DIR
    assert d.permissions.startswith("d")

    os.symlink(work / "info.txt", work / "link")
    link = sandbox.files.get_info(str(work / "link"))
    assert link.type == FileType.SYMLINK
    assert link.symlink_target == str(work / "info.txt")

    with pytest.raises(NotFoundException):
        sandbox.files.get_info(str(work / "nope"))


def test_exists(sandbox, work):
    (work / "here").write_text("x")
    assert sandbox.files.exists(str(work / "here"))
    assert sandbox.files.exists(str(work))
    assert not sandbox.files.exists(str(work / "not-here"))


def test_make_dir(sandbox, work):
    assert sandbox.files.make_dir(str(work / "x/y/z")) is True
    assert (work / "x/y/z").is_dir()
    assert sandbox.files.make_dir(str(work / "x/y/z")) is False
    (work / "f").write_text("")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.make_dir(str(work / "f"))


def test_list(sandbox, work):
    root = work / "tree"
    for d in ["subdir1/subdir1_1", "subdir1/subdir1_2", "subdir2/subdir2_1"]:
        (root / d).mkdir(parents=True)
    (root / "file1.txt").write_text("Hello, world!")

    entries = sandbox.files.list(str(root))
    assert [e.name for e in entries] == ["file1.txt", "subdir1", "subdir2"]
    assert [e.type for e in entries] == [FileType.FILE, FileType.DIR, FileType.DIR]
    assert [e.path for e in entries] == [str(root / n) for n in ["file1.txt", "subdir1", "subdir2"]]
    assert entries[0].size == len("Hello, world!")
    assert entries[0].permissions == "-rw-r--r--"

    deep = sandbox.files.list(str(root), depth=2)
    assert [e.name for e in deep] == [
        "file1.txt", "subdir1", "subdir1_1", "subdir1_2", "subdir2", "subdir2_1",
    ]
    assert deep[2].path == str(root / "subdir1/subdir1_1")
    assert len(sandbox.files.list(str(root), depth=5)) == 6

    with pytest.raises(InvalidArgumentException):
        sandbox.files.list(str(root), depth=0)
    with pytest.raises(InvalidArgumentException):
        sandbox.files.list(str(root / "file1.txt"))
    with pytest.raises(FileNotFoundException):
        sandbox.files.list(str(root / "missing"))


def test_rename(sandbox, work):
    sandbox.files.write(str(work / "old.txt"), "moving", metadata={"stage": "renamed"})
    info = sandbox.files.rename(str(work / "old.txt"), str(work / "sub/new.txt"))
    assert info.name == "new.txt"
    assert info.path == str(work / "sub/new.txt")
    assert info.type == FileType.FILE
    assert info.metadata == {"stage": "renamed"}
    assert not (work / "old.txt").exists()
    assert sandbox.files.read(str(work / "sub/new.txt")) == "moving"
    with pytest.raises(FileNotFoundException):
        sandbox.files.rename(str(work / "old.txt"), str(work / "again.txt"))


def test_remove(sandbox, work, e2b_user):
    (work / "dir/inner").mkdir(parents=True)
    (work / "dir/inner/f").write_text("x")
    (work / "file").write_text("x")
    # Made by the test (root); the daemon removes as `user`, who must own the tree.
    for p in [work / "dir", work / "dir/inner", work / "dir/inner/f", work / "file"]:
        os.chown(p, e2b_user.pw_uid, e2b_user.pw_gid)
    sandbox.files.remove(str(work / "dir"))
    sandbox.files.remove(str(work / "file"))
    assert not (work / "dir").exists()
    assert not (work / "file").exists()
    sandbox.files.remove(str(work / "never-existed"))
    assert not sandbox.files.exists(str(work / "dir"))


def test_metadata(sandbox, work):
    path = str(work / "meta.txt")
    info = sandbox.files.write(path, "m", metadata={"author": "mish", "purpose": "upload"})
    assert info.metadata == {"author": "mish", "purpose": "upload"}
    assert sandbox.files.get_info(path).metadata == {"author": "mish", "purpose": "upload"}
    listed = [e for e in sandbox.files.list(str(work)) if e.name == "meta.txt"]
    assert listed[0].metadata == {"author": "mish", "purpose": "upload"}
    assert os.getxattr(path, "user.e2b.author") == b"mish"

    info = sandbox.files.write(path, "again")
    assert info.metadata is None
    assert sandbox.files.get_info(path).metadata is None

    os.setxattr(path, "user.e2b.outofband", b"yes")
    assert sandbox.files.get_info(path).metadata == {"outofband": "yes"}

    infos = sandbox.files.write_files(
        [WriteEntry(path=str(work / "m1"), data="1"), WriteEntry(path=str(work / "m2"), data="2")],
        metadata={"source": "suite"},
    )
    assert [i.metadata for i in infos] == [{"source": "suite"}] * 2
    octet = sandbox.files.write(str(work / "m3"), "3", metadata={"k": "v"}, use_octet_stream=True)
    assert octet.metadata == {"k": "v"}


def test_as_template_user(sandbox, e2b_user, user_home):
    name, abs_dir = user_home
    info = sandbox.files.write(f"{name}/note.txt", "mine", user="user")
    assert info.path == str(abs_dir / "note.txt")
    st = (abs_dir / "note.txt").stat()
    assert (st.st_uid, st.st_gid) == (e2b_user.pw_uid, e2b_user.pw_gid)
    assert abs_dir.stat().st_uid == e2b_user.pw_uid

    got = sandbox.files.get_info(f"{name}/note.txt", user="user")
    assert (got.owner, got.path) == ("user", str(abs_dir / "note.txt"))
    assert sandbox.files.read(f"~/{name}/note.txt", user="user") == "mine"
    assert sandbox.files.make_dir(f"{name}/made", user="user") is True
    assert (abs_dir / "made").stat().st_uid == e2b_user.pw_uid
    assert [e.name for e in sandbox.files.list(name, user="user")] == ["made", "note.txt"]
    sandbox.files.rename(f"{name}/note.txt", f"{name}/made/moved.txt", user="user")
    sandbox.files.remove(f"{name}/made", user="user")
    assert sandbox.files.list(name, user="user") == []


def test_permissions_are_the_users(sandbox, e2b_user, work):
    closed = work / "closed"
    closed.mkdir()
    (closed / "secret").write_text("root only")
    os.chmod(closed, 0o700)

    with pytest.raises(SandboxException) as info:
        sandbox.files.read(str(closed / "secret"), user="user")
    assert "permission denied" in str(info.value).lower()
    with pytest.raises(SandboxException):
        sandbox.files.write(str(closed / "intruder"), "x", user="user")
    assert not (closed / "intruder").exists()
    with pytest.raises(SandboxException):
        sandbox.files.list(str(closed), user="user")
    with pytest.raises(SandboxException):
        sandbox.files.remove(str(closed / "secret"), user="user")
    assert (closed / "secret").exists()
    # root may
    assert sandbox.files.read(str(closed / "secret"), user="root") == "root only"
