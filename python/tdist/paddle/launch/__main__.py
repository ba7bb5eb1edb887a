"""``python3 -m tdist.paddle.launch``: see tdist.paddle.launch."""

import sys

from tdist.paddle.launch import launch

sys.exit(launch())
