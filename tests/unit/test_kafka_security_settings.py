"""The Kafka clients' security settings (KafkaSettings): what each client gets, what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from topology.kafka.config import KafkaSettings


def test_plaintext_is_the_default_and_adds_nothing_else() -> None:
    conf = KafkaSettings(bootstrap="b:1").client_config()
    assert conf == {"bootstrap.servers": "b:1", "security.protocol": "PLAINTEXT"}


def test_sasl_settings_reach_every_client_and_the_password_stays_out_of_the_repr() -> None:
    s = KafkaSettings(
        bootstrap="b:1",
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-256",
        kafka_sasl_username="svc",
        kafka_sasl_password="s3cret",  # noqa: S106 (a test credential)
        kafka_ssl_ca_location="/etc/ca.pem",
    )
    expected = {
        "bootstrap.servers": "b:1",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "svc",
        "sasl.password": "s3cret",
        "ssl.ca.location": "/etc/ca.pem",
    }
    assert expected.items() <= s.producer_config().items()
    assert expected.items() <= s.consumer_config("g").items()
    assert s.client_config() == expected
    assert "s3cret" not in repr(s) and "s3cret" not in str(s)


def test_the_environment_configures_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONLOG_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("CRONLOG_KAFKA_SASL_USERNAME", "svc")
    monkeypatch.setenv("CRONLOG_KAFKA_SASL_PASSWORD", "pw")
    conf = KafkaSettings().client_config()
    assert (conf["security.protocol"], conf["sasl.mechanism"], conf["sasl.username"]) == (
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
        "svc",
    )


@pytest.mark.parametrize("missing", ["kafka_sasl_username", "kafka_sasl_password"])
def test_a_sasl_protocol_without_credentials_is_refused_naming_the_field(missing: str) -> None:
    values = {"kafka_sasl_username": "svc", "kafka_sasl_password": "pw", missing: ""}
    with pytest.raises(ValidationError, match=missing):
        KafkaSettings(kafka_security_protocol="SASL_PLAINTEXT", **values)


def test_an_unknown_protocol_and_half_a_client_certificate_are_refused() -> None:
    with pytest.raises(ValidationError, match="kafka_security_protocol"):
        KafkaSettings(kafka_security_protocol="KERBEROS")
    with pytest.raises(ValidationError, match="go together"):
        KafkaSettings(kafka_security_protocol="SSL", kafka_ssl_certificate_location="/c.pem")


def test_the_password_may_come_from_a_file_and_never_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "cronlog.password"
    secret.write_text("pw-from-file\nsecond line ignored\n")
    monkeypatch.setenv("CRONLOG_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("CRONLOG_KAFKA_SASL_USERNAME", "svc")
    monkeypatch.setenv("CRONLOG_KAFKA_SASL_PASSWORD_FILE", str(secret))
    s = KafkaSettings()
    assert s.client_config()["sasl.password"] == "pw-from-file"
    assert "pw-from-file" not in str(s.redacted())
    explicit = KafkaSettings(kafka_sasl_password="given")  # noqa: S106 (a test credential)
    assert explicit.client_config()["sasl.password"] == "given"  # the file is the fallback


def test_an_unreadable_password_file_is_refused_naming_the_setting(tmp_path: Path) -> None:
    unreadable = r"CRONLOG_KAFKA_SASL_PASSWORD_FILE\): cannot read .*missing: No such file"
    with pytest.raises(ValidationError, match=unreadable):
        KafkaSettings(kafka_sasl_password_file=str(tmp_path / "missing"))
