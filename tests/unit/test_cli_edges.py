"""The launcher's console run hands the engine the secrets' values from the environment it was given."""

from __future__ import annotations

from pathlib import Path

from kvbake.launcher import cli as launcher

from test_launcher import FakeClient, env_file, env_for

TOKEN = "hf_" + "z9Y8x7W6v5" * 4  # shaped like a Hugging Face token; never a real one


class ReadingClient(FakeClient):
    """Records the secrets env file's text while docker run would read it."""

    def run(self, image, command, **options):
        self.secrets = Path(options["env_files"][-1]).read_text()
        return super().run(image, command, **options)


def test_a_run_passes_each_secret_value_from_the_environment_it_was_given(monkeypatch, tmp_path, capsys):
    client = ReadingClient()
    monkeypatch.setattr(launcher, "DockerClient", lambda host: client)
    env = {**env_for(SECRET_ENV='["HF_TOKEN"]', HF_TOKEN=TOKEN), "KVBAKE_ENV_FILE": str(env_file(tmp_path))}
    assert launcher.run([], env) == 0
    assert client.secrets == f"HF_TOKEN={TOKEN}\n" and len(client.runs) == 1
    assert TOKEN not in capsys.readouterr().out
