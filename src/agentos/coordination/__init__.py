"""What several nodes share through Redis: rate limits and tenant quotas, cluster-wide.

Off unless `coordination.redis_url` is set; then `link.open_link` connects (or stops start-up),
`limiters.ClusterLimiters` decides every rate limit in Redis (`gcra`) and
`quotas.ClusterQuotas` keeps the tenants' quota counters there. Without a URL nothing here
imports `redis`: the embedded default needs no service.
"""
