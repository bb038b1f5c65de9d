"""SSH to the board through the system's ``ssh``, ``rsync`` and ``tar``: commands, resumable copies, results.

Every connection uses ``BatchMode=yes`` (keys only: a password prompt would hang a script),
``StrictHostKeyChecking=accept-new`` with jetforge's own known-hosts file (the first connection
records the board's key, a changed key is refused), ``-p PORT``, ``-i KEY`` and an optional jump
host (a ``ProxyCommand`` running ssh with the same options, so the jump honours them too).

ssh's exit status 255 and its stderr are turned into one-line errors: unreachable host, refused
authentication, changed host key; "No space left on device" anywhere (rsync, cat, tar) is a full
disk on the board.

Copies: ``rsync --checksum --partial-dir`` sends only files whose content changed and keeps an
interrupted file on the board, so the next copy resumes from it (the partial file is the basis of
rsync's delta transfer).  Where rsync is missing on either side, a chunked copy over ssh appends to
``FILE.jetforge-part`` from the size already on the board, checks the SHA-256 and renames.
The manifest is always sent last and removed first, so a half-copied bundle never verifies.

Values from the command line are checked before ssh sees them: a user or host that could be read
as an option (``-oProxyCommand=...``) or holds shell characters is refused, and ``--`` ends ssh's and
rsync's options before the destination and the paths.  Every remote command is built from quoted
words.  ``rsync --delete-after`` runs only in a folder jetforge created (or found empty) and marked: its
marker (:data:`MARKER`) names the folder, so a copied marker proves nothing, and a ``manifest.json``
proves nothing at all (:mod:`.owner`).  ``--remote-dir`` is resolved once on the board and every command
and rsync then get that absolute path; a path with a control character is refused before connecting.

One job per module: :mod:`.target` (how to reach the board, as ssh/rsync arguments), :mod:`.errors` (the
one-line errors and what ssh's failures mean), :mod:`.process` (running ssh/rsync/tar), :mod:`.probe` (what
the board has, and the checks before a copy), :mod:`.owner` (which board folders a deploy may delete in),
:mod:`.transfer` (the copies both ways).  Import the names below from ``jetforge.deploy.remote``.
"""

from jetforge.deploy.bundle import REMOTE_MARKER as MARKER
from jetforge.deploy.remote.errors import (DISK_FULL, AuthRefusedError, DeployError, HostKeyError, HostUnreachableError,
                                           RemoteCommandError, RemoteDiskFullError, RemoteJetforgeMissingError,
                                           TransferError, classify)
from jetforge.deploy.remote.owner import MARKER_HEADER, check_remote_dir, marker_text
from jetforge.deploy.remote.probe import PROBE, RemoteInfo, check_free_space, install_instructions, probe
from jetforge.deploy.remote.process import Echo, Result, last_line, run_process, ssh_run
from jetforge.deploy.remote.target import SshTarget, default_known_hosts, rquote, split_destination
from jetforge.deploy.remote.transfer import (PART_SUFFIX, TransferStats, fetch_dir, push_rsync, push_ssh,
                                             rsync_available_locally)

__all__ = ["DISK_FULL", "MARKER", "MARKER_HEADER", "PART_SUFFIX", "PROBE", "AuthRefusedError", "DeployError", "Echo",
           "HostKeyError", "HostUnreachableError", "RemoteCommandError", "RemoteDiskFullError", "RemoteInfo",
           "RemoteJetforgeMissingError", "Result", "SshTarget", "TransferError", "TransferStats", "check_free_space",
           "check_remote_dir", "classify", "default_known_hosts", "fetch_dir", "install_instructions", "last_line",
           "marker_text", "probe", "push_rsync", "push_ssh", "rquote", "rsync_available_locally", "run_process",
           "split_destination", "ssh_run"]
