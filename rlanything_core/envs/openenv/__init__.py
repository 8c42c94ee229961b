"""The OpenEnv adapter: any OpenEnv environment server as an rlanything environment."""
