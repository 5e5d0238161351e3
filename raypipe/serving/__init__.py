"""Online serving on Ray Serve: Self-RAG answers with citations and critiques over HTTP.

- app.py: the app builder (`build_app`, `app_from_config` for configs/serve.yaml), `run_serve`
  (`raypipe serve`), `start_app`;
- deployments.py: Retriever, Generator (batched engine calls), TreeSearch (autoscaled decoding),
  Ingress (FastAPI);
- api.py / schemas.py / auth.py: routes, request models with the server's limits, bearer tokens;
- remote.py: engine and retriever proxies over deployment handles; batching.py: merging calls;
- demo.py: the serving step of `make demo` (`run_serve_demo`).
"""
