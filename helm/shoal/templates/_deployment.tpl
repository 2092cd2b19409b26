{{/* One Deployment of Shoal: `role` all (SQLite: the API and the scheduler in one pod),
or, on PostgreSQL, api (the API's replicas behind the Service) or scheduler (the backend
and the loop, one leading through the Lease, the others standing by). Called with a
dict: root (the chart's context), role, name, replicas, selector (labels, as YAML). */}}
{{- define "shoal.deployment" -}}
{{- $r := .root -}}
{{- $v := $r.Values -}}
{{- $fullname := include "shoal.fullname" $r -}}
{{- $spread := gt (int .replicas) 1 -}}
{{- $api := eq .role "api" -}}
{{- /* PostgreSQL: elected at any replica count, since a rolling update runs the surge pod
beside the old one (as kube-scheduler's --leader-elect). SQLite: one replica, Recreate. */}}
{{- $leader := eq $v.database.type "postgres" -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  namespace: {{ $r.Release.Namespace }}
  labels:
    {{- include "shoal.labels" $r | nindent 4 }}
    app.kubernetes.io/component: {{ $api | ternary "api" "scheduler" }}
spec:
  replicas: {{ .replicas }}
  {{- if eq $v.database.type "sqlite" }}
  strategy:
    type: Recreate  # one writer on the SQLite volume at a time, unelected
  {{- end }}
  selector:
    matchLabels:
      {{- .selector | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "shoal.labels" $r | nindent 8 }}
        {{- .selector | nindent 8 }}
      annotations:
        # Roll the pods when the policy or the tokens change.
        checksum/policy: {{ include (print $r.Template.BasePath "/configmap.yaml") $r | sha256sum }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "shoal.serviceAccountName" $r }}
      {{- if $api }}
      # The API role reads and writes the database only: no token for the Kubernetes API.
      automountServiceAccountToken: false
      {{- else }}
      automountServiceAccountToken: true
      {{- end }}
      enableServiceLinks: false
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with $v.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $v.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: 30
      containers:
        - name: shoal
          image: {{ include "shoal.image" $r | quote }}
          imagePullPolicy: {{ $v.image.pullPolicy }}
          args: [serve, --host, 0.0.0.0, --port, "8080", --backend, kubernetes,
                 --policy, {{ $v.policy.placement | quote }},
                 --min-runtime, {{ $v.policy.minRuntimeSeconds | quote }},
                 --interval, {{ $v.policy.intervalSeconds | quote }}
                 {{- if ne .role "all" }}, --role, {{ .role }}{{ end }}
                 {{- if $api }}, --api-workers, {{ $v.api.workers | quote }}{{ end }}]
          env:
            - name: SHOAL_BACKEND
              value: kubernetes
            - name: SHOAL_STATE_DIR
              value: /var/lib/shoal
            - name: SHOAL_DATABASE_URL
              {{- if eq $v.database.type "postgres" }}
              valueFrom:
                secretKeyRef:
                  name: {{ include "shoal.dbSecret" $r }}
                  key: {{ $v.database.postgres.existingSecretKey }}
              {{- else }}
              value: sqlite:////var/lib/shoal/shoal.db
              {{- end }}
            - name: SHOAL_API_TOKENS_FILE
              value: /etc/shoal/tokens/tokens.yaml
            - name: SHOAL_POLICY_FILE
              value: /etc/shoal/policy/policy.yaml
            - name: SHOAL_WORKER_SECURITY_CONTEXT_FILE
              value: /etc/shoal/policy/worker-security-context.json
            - name: SHOAL_WORKER_TOLERATIONS_FILE
              value: /etc/shoal/policy/worker-tolerations.json
            - name: SHOAL_KUBE_OPTIONS_FILE
              value: /etc/shoal/policy/kube-options.json
            - name: SHOAL_JOBS_NAMESPACE
              value: {{ $v.jobsNamespace.name }}
            - name: SHOAL_SCHEDULER_NAME
              value: {{ $v.schedulerName }}
            - name: SHOAL_RESERVE_IMAGE
              value: {{ include "shoal.image" $r | quote }}
            - name: SHOAL_LEADER_ELECTION
              value: {{ $leader | quote }}
            - name: SHOAL_LEADER_ELECTION_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: SHOAL_LEADER_ELECTION_LEASE
              value: shoal-scheduler
            - name: SHOAL_POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            {{- if eq .role "scheduler" }}
            # Workers report progress to the API's Service, not to this pod's probe port.
            - name: SHOAL_WORKER_API_URL
              value: http://{{ $fullname }}.{{ $r.Release.Namespace }}.svc:{{ $v.service.port }}
            {{- end }}
            - name: SHOAL_LOG_LEVEL
              value: {{ $v.logLevel }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: http
              containerPort: 8080
              protocol: TCP
          livenessProbe:
            httpGet: {path: /healthz, port: http}
            periodSeconds: 10
            failureThreshold: 3
          readinessProbe:
            httpGet: {path: /readyz, port: http}
            periodSeconds: 5
          startupProbe:
            httpGet: {path: /healthz, port: http}
            periodSeconds: 2
            failureThreshold: 60  # migrations run before the API listens
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $v.securityContext | nindent 12 }}
          volumeMounts:
            - {name: tmp, mountPath: /tmp}
            - {name: state, mountPath: /var/lib/shoal}
            - {name: tokens, mountPath: /etc/shoal/tokens, readOnly: true}
            - {name: policy, mountPath: /etc/shoal/policy, readOnly: true}
      volumes:
        - name: tmp
          emptyDir: {sizeLimit: 256Mi}
        - name: state
          {{- if eq $v.database.type "sqlite" }}
          persistentVolumeClaim:
            claimName: {{ default (printf "%s-data" $fullname) $v.database.sqlite.existingClaim }}
          {{- else }}
          emptyDir: {sizeLimit: 64Mi}  # the database is PostgreSQL; nothing to keep here
          {{- end }}
        - name: tokens
          secret:
            secretName: {{ include "shoal.authSecret" $r }}
            defaultMode: 0400
            items: [{key: tokens.yaml, path: tokens.yaml}]
        - name: policy
          configMap:
            name: {{ $fullname }}-policy
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if $v.affinity }}
      affinity:
        {{- toYaml $v.affinity | nindent 8 }}
      {{- else if $spread }}
      # Replicas on different nodes, so that one node's loss leaves a replica {{ $api | ternary "to serve" "to lead" }}.
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    {{- .selector | nindent 20 }}
      {{- end }}
{{- end -}}
