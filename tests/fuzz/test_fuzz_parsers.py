"""Every parser of outside data, fuzzed through its public entry point (the short CI run).

The long run (>= 100 000 inputs per parser) is benchmarks/reliability/fuzz_parsers.py; both draw from the
strategies and check the invariant in parser_fuzz.py: a JetforgeError with a message, or a correct
parse (structure, and a round trip through the writer where there is one); never another
exception, never a hang.  The CI profile is derandomized (the same inputs every run, so a red CI
always means a change in the code, not a luckier draw); set JETFORGE_FUZZ_EXAMPLES to run more.
"""

import os

import pytest
from hypothesis import HealthCheck, given, settings

import parser_fuzz  # tests/fuzz is on sys.path under pytest (rootdir-relative imports)

EXAMPLES = int(os.environ.get("JETFORGE_FUZZ_EXAMPLES", "40"))
CI = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), print_blob=True)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.parametrize("name", sorted(parser_fuzz.BUILDERS))
def test_parser_ends_in_a_clear_error_or_a_correct_parse(name, work):
    if name in parser_fuzz.NEEDS:
        pytest.importorskip(parser_fuzz.NEEDS[name], reason="%s's code needs %s" % (name, parser_fuzz.NEEDS[name]))
    target = parser_fuzz.make_target(name, work / name)
    outcomes = {"error": 0, "parsed": 0}

    @CI
    @given(data=target.inputs)
    def fuzz(data):
        outcomes[parser_fuzz.run_one(target, data)] += 1

    fuzz()
    assert sum(outcomes.values()) >= EXAMPLES
    # the seeds are valid files: the strategies reach real parses, not only the first error
    assert outcomes["parsed"] > 0, outcomes
