"""Online serving on Ray Serve: answers with citations and each method's trace over HTTP.

- app.py: the app builder (`build_app`), `start_app`, `serve_until_stopped`, from `ServeSections`
  (sections.py); the job entries (`raypipe serve`, `app_from_config` for configs/serve.yaml) are in
  raypipe.jobs.serve;
- deployments.py: Retrieval, Generator (batched engine calls), Evaluator, WebSearch; decoder.py:
  Decoder (autoscaled; runs the request's method); ingress.py: Ingress (FastAPI). The last two import
  no torch, so they start in seconds;
- api.py / schemas.py / auth.py: routes, request models with the server's limits, bearer tokens;
- remote.py: engine and searcher proxies over deployment handles; batching.py: merging calls;
- demo.py: the serving step of `make demo` (`serve_demo`).
"""
