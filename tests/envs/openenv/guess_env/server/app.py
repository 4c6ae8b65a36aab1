"""FastAPI app of the guess environment (OpenEnv's create_app)."""

from openenv.core.env_server.http_server import create_app

try:
    from ..models import GuessAction, GuessObservation
    from .guess_environment import GuessEnvironment
except ImportError:
    from server.guess_environment import GuessEnvironment

    from models import GuessAction, GuessObservation

app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=4)


def main(host: str = "0.0.0.0", port: int = 8000) -> None:
    import uvicorn

    uvicorn.run(app, host=host, port=port)


if __name__ == "__main__":
    main()
