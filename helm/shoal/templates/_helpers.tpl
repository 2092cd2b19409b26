{{/* Names and labels shared by every template. */}}
{{- define "shoal.name" -}}shoal{{- end -}}

{{- define "shoal.fullname" -}}
{{- if contains "shoal" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-shoal" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "shoal.labels" -}}
app.kubernetes.io/name: shoal
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "shoal.selectorLabels" -}}
app.kubernetes.io/name: shoal
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end -}}

{{/* The API's pods when it runs apart (PostgreSQL): what the Service selects then. */}}
{{- define "shoal.apiSelectorLabels" -}}
app.kubernetes.io/name: shoal
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: api
{{- end -}}

{{/* What the Service selects: the API's pods (PostgreSQL), else the one pod of both. */}}
{{- define "shoal.serviceSelectorLabels" -}}
{{- if eq .Values.database.type "postgres" -}}
{{- include "shoal.apiSelectorLabels" . -}}
{{- else -}}
{{- include "shoal.selectorLabels" . -}}
{{- end -}}
{{- end -}}

{{- define "shoal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "shoal.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Where GPU reservation pods live (the jobs namespace when no name is given). */}}
{{- define "shoal.reservationsNamespace" -}}
{{- .Values.reservations.namespace.name | default .Values.jobsNamespace.name -}}
{{- end -}}

{{- define "shoal.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "shoal.authSecret" -}}
{{- default (printf "%s-auth" (include "shoal.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "shoal.dbSecret" -}}
{{- default (printf "%s-database" (include "shoal.fullname" .)) .Values.database.postgres.existingSecret -}}
{{- end -}}

{{/* The admin token: given, else kept from the live Secret, else generated. */}}
{{- define "shoal.adminToken" -}}
{{- $live := lookup "v1" "Secret" .Release.Namespace (printf "%s-auth" (include "shoal.fullname" .)) -}}
{{- if and $live $live.data (hasKey $live.data "admin-token") -}}
{{- index $live.data "admin-token" | b64dec -}}
{{- else -}}
{{- randAlphaNum 40 -}}
{{- end -}}
{{- end -}}

{{/* The Prometheus scrape token (role metrics: /metrics only), generated once and kept. */}}
{{- define "shoal.metricsToken" -}}
{{- $live := lookup "v1" "Secret" .Release.Namespace (printf "%s-auth" (include "shoal.fullname" .)) -}}
{{- if .Values.serviceMonitor.scrapeToken -}}
{{- .Values.serviceMonitor.scrapeToken -}}
{{- else if and $live $live.data (hasKey $live.data "metrics-token") -}}
{{- index $live.data "metrics-token" | b64dec -}}
{{- else -}}
{{- randAlphaNum 40 -}}
{{- end -}}
{{- end -}}

{{- define "shoal.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (eq .Values.database.type "sqlite") -}}
{{- fail "replicaCount > 1 needs database.type=postgres: SQLite on a PVC serves one replica" -}}
{{- end -}}
{{- if and (eq .Values.database.type "postgres") (not .Values.database.postgres.url) (not .Values.database.postgres.existingSecret) -}}
{{- fail "database.type=postgres needs database.postgres.url or database.postgres.existingSecret" -}}
{{- end -}}
{{- end -}}

{{/* teamNamespaces as a JSON list: each once, without the jobs namespace (which has its
Role already); the -jobs Role is rendered in each, and the backend takes jobs there. */}}
{{- define "shoal.teamNamespaces" -}}
{{- without (uniq (.Values.teamNamespaces | default list)) .Values.jobsNamespace.name | toJson -}}
{{- end -}}

{{/* The kubernetes backend's options (scheduler/backends/kubernetes/runtime.py KUBE_OPTIONS). */}}
{{- define "shoal.kubeOptions" -}}
{{- $r := .Values.reservations -}}
{{- $opts := dict "reserveImagePullSecrets" (list) -}}
{{- range .Values.imagePullSecrets -}}
{{- $_ := set $opts "reserveImagePullSecrets" (append (get $opts "reserveImagePullSecrets") (.name | default .)) -}}
{{- end -}}
{{- $teams := include "shoal.teamNamespaces" . | fromJsonArray -}}
{{- $_ := set $opts "teamNamespaces" $teams -}}
{{- if not .Values.rbac.foreignPods -}}
{{- /* Pod writes are granted there only: the jobs namespace and the team namespaces. */ -}}
{{- $_ := set $opts "foreignNamespaces" (prepend $teams .Values.jobsNamespace.name) -}}
{{- end -}}
{{- if $r.priorityClass.name -}}
{{- $_ := set $opts "reservePriorityClass" $r.priorityClass.name -}}
{{- end -}}
{{- if $r.runtimeClassName -}}
{{- $_ := set $opts "reserveRuntimeClass" $r.runtimeClassName -}}
{{- end -}}
{{- if $r.shareCdiKind -}}
{{- $_ := set $opts "shareCdiKind" $r.shareCdiKind -}}
{{- end -}}
{{- $_ := set $opts "reserveNamespace" (include "shoal.reservationsNamespace" .) -}}
{{- $_ := set $opts "reservationUuidTimeoutSeconds" $r.uuidTimeoutSeconds -}}
{{- $_ := set $opts "reserveMemoryMiB" $r.memoryMiB -}}
{{- $c := .Values.kubeClient -}}
{{- $_ := set $opts "clientQps" $c.qps -}}
{{- $_ := set $opts "clientBurst" $c.burst -}}
{{- $_ := set $opts "bindWorkers" $c.bindWorkers -}}
{{- $_ := set $opts "launchWorkers" $c.launchWorkers -}}
{{- if .Values.workerPriorityClassName -}}
{{- $_ := set $opts "workerPriorityClass" .Values.workerPriorityClassName -}}
{{- end -}}
{{- if .Values.workerRuntimeClassName -}}
{{- $_ := set $opts "workerRuntimeClass" .Values.workerRuntimeClassName -}}
{{- end -}}
{{- if not (kindIs "invalid" .Values.workerShmMiB) -}}
{{- $_ := set $opts "workerShmMiB" (int .Values.workerShmMiB) -}}
{{- end -}}
{{- $_ := set $opts "dra" .Values.dra.enabled -}}
{{- $_ := set $opts "draGpuClass" .Values.dra.gpuClass -}}
{{- $_ := set $opts "draMigClass" .Values.dra.migClass -}}
{{- $_ := set $opts "draOutsidePool" .Values.dra.outsidePool -}}
{{- $_ := set $opts "nodePoolKey" .Values.nodePool.key -}}
{{- $_ := set $opts "nodePoolValue" .Values.nodePool.value -}}
{{- $_ := set $opts "workloads" .Values.workloads.enabled -}}
{{- $_ := set $opts "nominateFor" .Values.nominateFor -}}
{{- toJson $opts -}}
{{- end -}}

{{/* The workers' container securityContext: workerSecurityContext, plus runAsNonRoot
(and runAsUser) with workerRestricted.enabled (Pod Security "restricted"). */}}
{{- define "shoal.workerSecurityContext" -}}
{{- $sc := deepCopy .Values.workerSecurityContext -}}
{{- $r := .Values.workerRestricted | default dict -}}
{{- if $r.enabled -}}
{{- $_ := set $sc "runAsNonRoot" true -}}
{{- if not (kindIs "invalid" $r.runAsUser) -}}
{{- $_ := set $sc "runAsUser" (int $r.runAsUser) -}}
{{- end -}}
{{- end -}}
{{- toJson $sc -}}
{{- end -}}
