"""Run the rlanything CLI with the supervised warm start's shared-prefix forward off (whole
prompts), to see how far rounding alone moves the warm-started policy."""

import functools
import sys

import rlanything_core.models.sft as sft
from rlanything_flows.cli import main

sft.response_logprobs = functools.partial(sft.response_logprobs, share_prefix=False)
sys.exit(main())
