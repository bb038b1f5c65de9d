"""Action-recognition training recipes: :mod:`.walking_direction` trains the walking-direction model that
``jetforge app action`` ships, on labels derived from real person tracks."""
