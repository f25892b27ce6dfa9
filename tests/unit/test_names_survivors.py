"""A node name outside the deployment file's rule is refused naming the option and the name, with a fix; a good one
passes unchanged."""

from __future__ import annotations

import pytest

from kvbake.errors import UsageError
from kvbake.names import check_node_name


def test_a_node_name_outside_the_rule_is_refused_naming_the_option_and_the_name_with_a_fix():
    with pytest.raises(UsageError) as caught:
        check_node_name("Spark;A", "--node")
    assert "--node" in caught.value.message and "'Spark;A'" in caught.value.message
    assert caught.value.fix and "64" in caught.value.fix


def test_a_node_name_inside_the_rule_is_returned_as_given():
    assert check_node_name("spark-a.1_x", "--node") == "spark-a.1_x"
