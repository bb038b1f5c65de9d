"""Which board folders a deploy may delete in: only one that jetforge created (or found empty) and marked.

The copy makes the board's folder an exact image of the bundle (``rsync --delete-after``), so the
folder must be jetforge's own.  Only jetforge's marker proves that: the file :data:`MARKER` in the
folder, holding :data:`MARKER_HEADER` on its first line and the folder's own absolute, resolved path
(``pwd -P``) on its second, so a marker copied into another folder proves nothing there.  A
``manifest.json`` proves nothing either (any app may have one).

The states the board's shell reports (:data:`OWNERSHIP` sets ``st`` for the folder ``$R``):

* ``marked``: the marker names this folder: jetforge's;
* ``empty``: nothing in it: jetforge claims it (writes the marker) before copying;
* ``legacy``: an empty marker, as jetforge wrote before markers named their folder: claimed, the marker
  rewritten;
* ``foreign``: a marker that names another folder (copied), is not a plain file, or that jetforge did not
  write: refused;
* ``unmarked``: a ``manifest.json`` and no marker: a user's folder, or a bundle folder of jetforge's first
  deploy (which wrote no marker); the two cannot be told apart, so it is refused with how to proceed;
* ``other``: files and no marker: refused.

The home folder, ``/`` and any folder above the home are refused whatever they hold.  The probe
reports the state (:func:`check_remote_dir` refuses before anything is sent); the copy's first
command (:data:`CLAIM`) checks it again on the board, writes the marker, and only then does anything
delete there.
"""

import shlex
from typing import Sequence

from jetforge.deploy.bundle import MANIFEST
from jetforge.deploy.bundle import REMOTE_MARKER as MARKER
from jetforge.deploy.remote.errors import DeployError
from jetforge.deploy.remote.target import SshTarget
from jetforge.deploy.safety import shown_value

MARKER_HEADER = "jetforge deploy folder v1: jetforge deploy replaces and deletes the files of this folder"
OWNED_STATES = ("marked", "empty", "legacy")

# the folder's state into $st (and the path a marker names into $mf), for the resolved folder $R; no braces (format)
OWNERSHIP = r"""M="$R"/{marker}; st=other; mf=
if [ -L "$M" ]; then st=foreign
elif [ -f "$M" ]; then
  if [ ! -s "$M" ]; then st=legacy
  else h=$(head -n 1 "$M" 2>/dev/null); mf=$(sed -n 2p "$M" 2>/dev/null)
    if [ "$h" = {header} ] && [ "$mf" = "$R" ]; then st=marked; else st=foreign; fi
  fi
elif [ -e "$M" ]; then st=foreign
elif out=$(ls -A -- "$R" 2>/dev/null) && [ -z "$out" ]; then st=empty
elif [ -e "$R"/{manifest} ] || [ -L "$R"/{manifest} ]; then st=unmarked
fi
"""

# the copy's first command: check the state again, write the marker where jetforge claims the folder, remove the
# manifest (sent again last); exit 3 (and the state on stdout) where the folder is not jetforge's
CLAIM = "R={dir}\n" + OWNERSHIP + r"""case $st in
  marked) ;;
  empty|legacy) printf '%s\n%s\n' {header} "$R" > "$M" || exit 1 ;;
  *) echo "owner=$st"; exit 3 ;;
esac
rm -f -- "$R"/{sent_last}
"""


def ownership_script() -> str:
    """:data:`OWNERSHIP` with the marker's name and header filled in (``$R``: the resolved folder)."""
    return OWNERSHIP.format(marker=shlex.quote(MARKER), header=shlex.quote(MARKER_HEADER),
                            manifest=shlex.quote(MANIFEST))


def claim_script(folder: str, sent_last: str) -> str:
    """:data:`CLAIM` for ``folder`` (the probe's resolved absolute path), removing ``sent_last``."""
    return CLAIM.format(dir=shlex.quote(folder), marker=shlex.quote(MARKER), header=shlex.quote(MARKER_HEADER),
                        manifest=shlex.quote(MANIFEST), sent_last=shlex.quote(sent_last))


def marker_text(folder: str) -> str:
    """What jetforge writes into the marker of ``folder`` (absolute, resolved)."""
    return "%s\n%s\n" % (MARKER_HEADER, folder)


def _is_home_or_above(top: str, homes: Sequence[str]) -> bool:
    return top == "/" or any(h and (h.rstrip("/") == top or h.startswith(top + "/")) for h in homes)


def check_remote_dir(folder: str, home: str, state: str, target: SshTarget, marker_for: str = "",
                     home_resolved: str = "") -> None:
    """Refuse a board folder where the copy's deletions could hit the user's files (see the module)."""
    top = folder.rstrip("/") or "/"
    if _is_home_or_above(top, (home, home_resolved)):
        raise DeployError("--remote-dir %s is %s on %s: the copy deletes what the bundle does not hold there"
                          % (folder, "the root folder" if top == "/" else "the remote home or above it",
                             target.label),
                          hint="give a folder of its own, e.g. --remote-dir ~/jetforge/bundles/NAME (the default)")
    if state in OWNED_STATES:
        return
    remove = "on the board: rm -r -- %s" % shlex.quote(folder)
    if state == "foreign":
        whose = ("copied or moved from %s (it names that folder, not this one)" % shown_value(marker_for)
                 if marker_for else "that jetforge did not write")
        raise DeployError("%s on %s holds a jetforge marker (%s) %s: the copy would delete the folder's files"
                          % (folder, target.label, MARKER, whose),
                          hint="choose another --remote-dir (a new or empty folder); if this folder's files are "
                               "not needed, remove it yourself (%s) and deploy again" % remove)
    if state == "unmarked":
        raise DeployError("%s on %s holds a manifest.json but no jetforge marker (%s): it may be your own folder, "
                          "and the copy would delete its other files" % (folder, target.label, MARKER),
                          hint="choose another --remote-dir (a new or empty folder); if it is a bundle folder of "
                               "an old jetforge, remove it yourself (%s) and deploy again" % remove)
    raise DeployError("%s on %s already holds files and is not a folder jetforge made (it has no %s marker): "
                      "the copy would delete them" % (folder, target.label, MARKER),
                      hint="choose a new or empty --remote-dir (the default is ~/jetforge/bundles/NAME)")
