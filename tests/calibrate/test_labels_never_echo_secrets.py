"""``calibrate --eval DIR --labels FILE`` never prints what FILE holds (issue 25, hole (c)).

A hostile probe passed credential files as ``--labels`` and the error quoted them: a ``.netrc`` password, a
``.git-credentials`` token, an AWS key id and part of an SSH private key were printed.  The README promises that
errors name the file and the line but never quote its content.  Each secret below is a distinctive token; the
test fails if any of them, or any 8-character piece of one, reaches stdout or stderr.
"""

import pytest

from jetforge.cli.main import main

SECRETS = {
    ".netrc": ("machine api.example.com login bob password Hunter2Sekr1t\n", "Hunter2Sekr1t"),
    ".git-credentials": ("https://bob:ghp_R4nd0mT0k3nV4lu3xyz@github.com\n", "ghp_R4nd0mT0k3nV4lu3xyz"),
    "credentials": ("[default]\naws_access_key_id = AKIAQWERTYUIOPASDFGH\n"
                    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY\n", "AKIAQWERTYUIOPASDFGH"),
    "id_ed25519": ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB\n"
                   "-----END OPENSSH PRIVATE KEY-----\n", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"),
    # the same shapes a careless label file has: a tab-separated line whose label is the secret
    "labels.txt": ("img_000.jpg\tS3cr3tT0k3nInAL4bel\n", "S3cr3tT0k3nInAL4bel"),
    "people.json": ('{"format": "jetforge-person-boxes/1", "guard_frames": "Pa55w0rdInAField", "clips": {}, '
                    '"frames": []}\n', "Pa55w0rdInAField"),
    "broken.json": ('{"token": "Br0kenJs0nT0ken", \n', "Br0kenJs0nT0ken"),
}


def pieces(secret, width=8):
    return {secret[i:i + width] for i in range(len(secret) - width + 1)}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_label_file_content_is_never_printed(name, tiny_model, image_dir, tmp_path, capsys):
    content, secret = SECRETS[name]
    path = tmp_path / name
    path.write_text(content)
    rc = main(["calibrate", str(tiny_model), "--data", str(image_dir), "--eval", str(image_dir), "--labels",
               str(path), "--samples", "16", "--no-plots"])
    out, err = capsys.readouterr()
    assert rc == 1, (out, err)
    errors = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("jetforge: ")]
    assert len(errors) == 1 and str(path) in errors[0], err  # one line naming the file...
    leaked = [p for p in pieces(secret) if p in out + err]
    assert not leaked, "the error quoted the file: %s" % err  # ...never what it holds


def test_calibrate_never_writes_over_the_models_sidecar(tiny_model, image_dir, capsys):
    """``calibrate m.onnx --out m.onnx.json`` overwrote the sidecar and made the model unusable (issue 25)."""
    sidecar = tiny_model.with_name(tiny_model.name + ".json")
    before = sidecar.read_bytes()
    rc = main(["calibrate", str(tiny_model), "--data", str(image_dir), "--samples", "16", "--no-plots",
               "--out", str(sidecar)])
    out, err = capsys.readouterr()
    assert rc == 1 and "sidecar of the input" in err and sidecar.read_bytes() == before
