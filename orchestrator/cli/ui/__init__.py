"""``orchestrate ui``: a person at the wheel, in a browser, over the same files.

A local web app (the optional extra ``ui``: Starlette served by uvicorn; every asset
ships in the package, nothing is fetched from elsewhere) that lists the runs of the work
directories it is given, shows a run (its timeline, its asks and answers, its outputs,
its events as they happen, its evidence files), takes an answer for each pending request
through the answer gate ``orchestrate respond`` goes through (a refusal is shown in
place), resumes a run asleep on a timer when it is due if asked, and shows a task board.

- ``runs``: what the pages show, read from the work directories as the commands read
  them (nothing is loaded that a page does not show);
- ``guard``: the access token, the form token, the server's own addresses (any other
  ``Host`` is refused), and paths that never leave a served directory;
- ``pages``: the HTML, every text escaped, prompts rendered from a safe Markdown subset;
- ``places``: where the page finds runs, a work directory's files or a PostgreSQL store;
- ``reports``: the regression runs served: the files of regression-run folders only;
- ``shapes``: what the run page says around its forms: the shape an answer must have,
  why the answer before was refused, a run asleep on a timer;
- ``waker``: the runs to resume when their timer is due, and the thread that does it;
- ``app``: the routes; ``serve``: the command.

Part of the cli wing: it may import what the cli may.
"""
