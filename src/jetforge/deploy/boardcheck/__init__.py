"""`jetforge board-check`: run a bundle on the board and compare its outputs with the workstation reference (`check`), and
the comparison rules (`compare`)."""
