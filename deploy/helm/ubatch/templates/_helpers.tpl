{{/* The release's base name, at most 40 characters so that suffixed names stay within 63. */}}
{{- define "ubatch.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ubatch.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component (node, router, redis): pass (list $ "node"). */}}
{{- define "ubatch.selector" -}}
app.kubernetes.io/name: {{ (index . 0).Chart.Name }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The routers' ServiceAccount: router.serviceAccount.name, else NAME-router when the chart
creates it, else the namespace's default. */}}
{{- define "ubatch.routerServiceAccount" -}}
{{- if .Values.router.serviceAccount.name -}}
{{- .Values.router.serviceAccount.name -}}
{{- else if .Values.router.serviceAccount.create -}}
{{- include "ubatch.fullname" . }}-router
{{- else -}}
default
{{- end -}}
{{- end -}}

{{/* Whether nodes advertise their pod IP: a gateway (ext_proc) or discovery from the
EndpointSlices knows them by IP:port, and Redis entries are matched to that URL. */}}
{{- define "ubatch.advertiseIP" -}}
{{- if or .Values.router.extProc.enabled .Values.router.kubeDiscovery -}}true{{- end -}}
{{- end -}}

{{- define "ubatch.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{- define "ubatch.redisURL" -}}
{{- if .Values.redis.enabled -}}
redis://{{ include "ubatch.fullname" . }}-redis:6379
{{- else -}}
{{- required "redis.url is required when redis.enabled is false" .Values.redis.url -}}
{{- end -}}
{{- end -}}

{{/* The image's user, non-root, no privilege escalation, no capabilities, read-only root. */}}
{{- define "ubatch.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: [ALL]
{{- end -}}

{{/* HF_TOKEN for pulls of gated models, when hfTokenSecret names a Secret. */}}
{{- define "ubatch.hfEnv" -}}
{{- if .Values.hfTokenSecret -}}
- name: HF_TOKEN
  valueFrom:
    secretKeyRef: {name: {{ .Values.hfTokenSecret }}, key: HF_TOKEN}
{{- end }}
{{- end -}}

{{/* The init container that pulls the model by name into /data, when there is one. */}}
{{- define "ubatch.pull" -}}
{{- if .Values.model -}}
initContainers:
  - name: pull
    image: {{ include "ubatch.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args: ["pull", {{ .Values.model | quote }}]
    env:
      - {name: UBATCH_HOME, value: /data}
      {{- with include "ubatch.hfEnv" . }}{{ . | nindent 6 }}{{ end }}
    securityContext:
      {{- include "ubatch.containerSecurity" . | nindent 6 }}
    volumeMounts:
      - {name: data, mountPath: /data}
      - {name: tmp, mountPath: /tmp}
{{- end }}
{{- end -}}
