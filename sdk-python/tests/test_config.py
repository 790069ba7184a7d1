"""`jobhost_sdk.config` natively: the values of the running test's context, none outside."""

import pytest

from jobhost_sdk import JobError, config, fatal, retryable
from jobhost_sdk.config import ConfigError
from jobhost_sdk.testing import TestContext


def read(payload, ctx):
    ctx.info("read", endpoint=config.require("endpoint"), region=config.get("region") or "none")


def test_a_handler_reads_the_values_its_test_context_gives():
    run = TestContext(config={"endpoint": "https://hooks.test/in"}).run(read, {})
    assert run.error is None
    assert run.logs[0].fields == [("endpoint", "https://hooks.test/in"), ("region", "none")]


def test_a_missing_required_value_is_fatal_and_names_the_key():
    assert TestContext().run(read, {}).error == fatal(
        "the plugin needs the configuration value `endpoint`: set it in `jobhost.toml` under "
        "`[plugins.<plugin file name>.config]` (or `.secrets`)"
    )


def test_outside_a_test_run_no_value_is_configured():
    assert config.get("endpoint") is None
    with pytest.raises(JobError):
        config.require("endpoint")


def test_a_failing_configuration_source_is_retryable():
    def failing(payload, ctx):
        raise ConfigError("upstream", "vault is sealed")

    assert TestContext().run(failing, {}).error == retryable(
        "the configuration source failed: vault is sealed"
    )
    assert str(ConfigError("io", "disk gone")) == "reading the configuration failed: disk gone"
