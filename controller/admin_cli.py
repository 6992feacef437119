"""``mlsched admin``: credentials made on the controller's host from its state directory.

``issue-user NAME`` writes a user's (or ``--admin``'s) certificate bundle; ``join-token NODE``
prints a one-time, expiring token an agent redeems for its node certificate. Both need the
cluster CA's key (``<state-dir>/tls/ca.key``), so they run as the controller's user."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from controller.auth.jointokens import DEFAULT_TTL_S, JoinTokens
from mlsched.security import bundle
from mlsched.security.authority import Authority
from mlsched.security.names import ADMIN, USER, NameError_, identity
from mlsched.security.pki import write_secret


def add_admin_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("admin", help="issue user credentials and node join tokens")
    sub = p.add_subparsers(dest="admin_command", required=True, metavar="ACTION")

    u = sub.add_parser("issue-user", help="write a user's certificate bundle (ca/cert/key.pem)")
    u.add_argument("name", help="the user name the certificate states (1-64 characters)")
    u.add_argument("--admin", action="store_true", help="role admin: sees every job in full")
    u.add_argument("--out", type=Path, help="bundle directory [./mlsched-credentials-NAME]")
    _state_dir(u)
    u.set_defaults(func=cmd_issue_user)

    t = sub.add_parser("join-token", help="print a one-time join token for one node")
    t.add_argument("node", help="the node id the token may join as")
    t.add_argument(
        "--ttl", type=float, default=DEFAULT_TTL_S, help="seconds it stays valid [%(default)s]"
    )
    t.add_argument("--out", type=Path, help="write it to this file (0600) instead of stdout")
    _state_dir(t)
    t.set_defaults(func=cmd_join_token)


def _state_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", type=Path, required=True, help="the controller's state directory")


def issue_user(state_dir: Path, name: str, admin: bool, out: Path) -> None:
    """Write the bundle of user ``name`` into ``out``."""
    who = identity(ADMIN if admin else USER, name)
    Authority(state_dir).issue_bundle(who).write(out)


def issue_join_token(state_dir: Path, node: str, ttl_s: float) -> str:
    authority = Authority(state_dir)
    if not authority.exists():
        raise FileNotFoundError(
            f"no cluster CA in {authority.dir}: start the controller on this state directory"
        )
    return JoinTokens(authority.dir).issue(node, time.time(), ttl_s)


def cmd_issue_user(args: argparse.Namespace) -> int:
    out = args.out or Path(f"mlsched-credentials-{args.name}")
    try:
        issue_user(args.state_dir, args.name, args.admin, out)
    except (NameError_, OSError) as exc:
        print(f"mlsched admin: {exc}", file=sys.stderr)
        return 2
    print(
        f"wrote {out}/{{{bundle.CA_FILE},{bundle.CERT_FILE},{bundle.KEY_FILE}}}; give it to"
        f" {args.name} for ~/.config/mlsched (or ${bundle.CREDENTIALS_ENV})"
    )
    return 0


def cmd_join_token(args: argparse.Namespace) -> int:
    try:
        token = issue_join_token(args.state_dir, args.node, args.ttl)
    except (NameError_, ValueError, OSError) as exc:
        print(f"mlsched admin: {exc}", file=sys.stderr)
        return 2
    if args.out is None:
        print(token)
    else:
        write_secret(args.out, (token + "\n").encode())
    return 0
