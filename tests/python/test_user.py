"""Which Unix user a call acts as.

Against envd >= 0.4.0 (debug mode assumes 99.99.99) the SDK sends no `Authorization`
header unless `user=` is given, so the daemon's default user applies (here: the user the
daemon runs as). `user="name"` sends `Authorization: Basic base64("name:")`.
"""

import os
import pwd

import pytest
from e2b import AuthenticationException, PtySize

from e2e_util import Collector


def test_default_user_is_the_configured_one(sandbox, e2b_user):
    r = sandbox.commands.run("id -un; echo $HOME")
    assert r.stdout == f"{e2b_user.pw_name}\n{e2b_user.pw_dir}\n"


def test_explicit_root(sandbox, require_root):
    r = sandbox.commands.run("id -un; id -u", user="root")
    assert r.stdout == "root\n0\n"


def test_e2b_default_template_user(sandbox, e2b_user, tmp_path):
    r = sandbox.commands.run("id -un; id -u; pwd; echo $HOME $USER", user="user")
    assert r.stdout == (
        f"user\n{e2b_user.pw_uid}\n{e2b_user.pw_dir}\n{e2b_user.pw_dir} user\n"
    )


def test_e2b_user_in_background_and_pty(sandbox, e2b_user, kill_after):
    h = sandbox.commands.run("id -un; sleep 0.2", background=True, user="user")
    assert h.wait().stdout == "user\n"

    p = sandbox.pty.create(PtySize(rows=24, cols=80), user="user")
    kill_after(p.pid)
    out = Collector(p)
    sandbox.pty.send_stdin(p.pid, b'echo "WHO=$(id -un)"\n')
    assert out.wait_for("WHO=user", kind="pty"), out.text("pty")
    sandbox.pty.send_stdin(p.pid, b"exit\n")
    assert out.join(10)
    assert out.exception is None, repr(out.exception)


def test_unknown_user_is_unauthenticated(sandbox):
    with pytest.raises(AuthenticationException):
        sandbox.commands.run("true", user="no-such-user-hangar-e2e")
