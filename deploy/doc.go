// Package deploy holds the files that run a ubatch fleet: nginx.conf (the entry point),
// prometheus.yml with targets/ (scraping), alerts.yml (KPI alerts, tested by alerts_test.yml)
// and grafana-dashboard.json. It has no code: its tests check the files with the real tools
// (promtool, nginx, Prometheus) and run a whole fleet end to end. See docs/deploy.md.
package deploy
