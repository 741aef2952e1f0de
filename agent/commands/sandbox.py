"""`evotrainer sandbox build|info`: build the offline sandbox image and report on the engine."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `sandbox` sub-app to `app`."""
    sandbox = typer.Typer(help="The Docker sandbox that runs candidate harness code.", no_args_is_help=True)

    @sandbox.command("build")
    def build(
        force: bool = typer.Option(False, "--force", help="Rebuild everything, debootstrap included."),
    ) -> None:
        """Build the sandbox image offline (debootstrap + docker import); instant when it exists."""
        import time

        from agent.commands.output import console as make_console
        from harness.failures import InfraError
        from sandboxes.docker import engine_client
        from sandboxes.image import build_image

        console = make_console()
        try:
            client = engine_client()
        except InfraError as exc:
            console.print(f"[red]{exc.message}[/red]")
            raise typer.Exit(1) from exc
        t0 = time.monotonic()
        try:
            tag = build_image(client, force=force, log=console.print)
        except (RuntimeError, ValueError) as exc:
            console.print(f"[red]sandbox image build failed: {exc}[/red]")
            raise typer.Exit(1) from exc
        console.print(f"sandbox image {tag} ready ({time.monotonic() - t0:.1f}s)")

    @sandbox.command("info")
    def info() -> None:
        """Say whether a Docker engine is reachable and whether the sandbox image is present."""
        from agent.commands.output import console as make_console
        from harness.failures import InfraError
        from sandboxes.docker import engine_client
        from sandboxes.image import CACHE_DIR, image_tag, rootfs_key

        console = make_console()
        tag = image_tag()
        console.print(f"image tag:     {tag}")
        console.print(f"rootfs cache:  {CACHE_DIR / f'rootfs-{rootfs_key()}.tar'}")
        try:
            client = engine_client()
        except InfraError as exc:
            console.print(f"engine:        [red]unreachable[/red] ({exc.message})")
            console.print("fallback:      process sandbox (weaker isolation)")
            raise typer.Exit(1) from exc
        version = client.version().get("Version", "?")
        console.print(f"engine:        reachable (Docker {version})")
        import docker.errors

        try:
            client.images.get(tag)
            console.print("image present: yes")
        except docker.errors.ImageNotFound:
            console.print("image present: [yellow]no[/yellow] (run `evotrainer sandbox build`)")
            raise typer.Exit(1) from None

    app.add_typer(sandbox, name="sandbox")
