/**
 * The KWOK stages of the fleet: fake nodes that turn Ready, and pods that
 * run and then end as a Job's pod with jobharvest's sidecar ends on a real
 * node. Written here rather than taken from KWOK's defaults, because the
 * pod's end is the part the harvester reads: the sidecar (a restartable init
 * container) terminates with the exit code and termination message that the
 * pod's annotations name, as a sidecar that drained (exit 0, its message) or
 * one that a SIGKILL ended (137, no message) leaves them.
 */

/** Pod annotations the fleet sets on a Job's template to say how its sidecar ends. */
export const FLEET_ANNOTATIONS = {
  /** The sidecar's termination message, verbatim (absent: none). */
  message: 'fleet.jobharvest.test/sidecar-message',
  /** The sidecar's exit code (absent: 0). */
  exitCode: 'fleet.jobharvest.test/sidecar-exit-code',
  /** How long the pod runs before it completes, e.g. "2s" (absent: at once). */
  runFor: 'fleet.jobharvest.test/run-for',
} as const;

/** Nodes with this annotation are the fleet's; KWOK manages only them. */
export const FAKE_NODE_ANNOTATION = 'kwok.x-k8s.io/node';

function stage(name: string, kind: 'Node' | 'Pod', matchExpressions: object[], next: object, delay?: object): object {
  return {
    apiVersion: 'kwok.x-k8s.io/v1alpha1',
    kind: 'Stage',
    metadata: { name },
    spec: { resourceRef: { apiGroup: 'v1', kind }, selector: { matchExpressions }, ...(delay ? { delay } : {}), next },
  };
}

const NODE_READY = `
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
addresses:
{{ with NodeIP }}
- address: {{ . | Quote }}
  type: InternalIP
{{ end }}
{{ with NodeName }}
- address: {{ . | Quote }}
  type: Hostname
{{ end }}
{{ with NodePort }}
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ . }}
{{ end }}
allocatable:
{{ YAML .status.allocatable 1 }}
capacity:
{{ YAML .status.capacity 1 }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: fake
  kubeProxyVersion: fake
phase: Running
`;

const POD_RUNNING = `
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPWith .spec.nodeName }}
hostIP: {{ . | Quote }}
{{ end }}
{{ with PodIPWith .spec.nodeName false ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ . | Quote }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
`;

// The main containers exit 0; the sidecar, the restartable init container,
// ends as the pod's annotations say.
const POD_SUCCEEDED = `
{{ $now := Now }}
{{ $ann := or .metadata.annotations dict }}
{{ $code := or (index $ann "${FLEET_ANNOTATIONS.exitCode}") "0" }}
{{ $message := index $ann "${FLEET_ANNOTATIONS.message}" }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: Ready
  reason: PodCompleted
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: ContainersReady
  reason: PodCompleted
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: 0
      finishedAt: {{ $now | Quote }}
      reason: Completed
      startedAt: {{ $now | Quote }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {{ if eq .restartPolicy "Always" }}{{ $code }}{{ else }}0{{ end }}
      finishedAt: {{ $now | Quote }}
      reason: {{ if and (eq .restartPolicy "Always") (ne $code "0") }}Error{{ else }}Completed{{ end }}
      startedAt: {{ $now | Quote }}
      {{ if and (eq .restartPolicy "Always") $message }}
      message: {{ $message | Quote }}
      {{ end }}
{{ end }}
phase: Succeeded
`;

export function fleetStages(): object[] {
  const notDeleted = { key: '.metadata.deletionTimestamp', operator: 'DoesNotExist' };
  return [
    stage('node-initialize', 'Node', [{ key: '.status.conditions.[] | select( .type == "Ready" ) | .status', operator: 'NotIn', values: ['True'] }], { statusTemplate: NODE_READY }),
    stage('pod-ready', 'Pod', [notDeleted, { key: '.status.phase', operator: 'In', values: ['Pending'] }], { statusTemplate: POD_RUNNING }),
    stage(
      'pod-complete',
      'Pod',
      [notDeleted, { key: '.status.phase', operator: 'In', values: ['Running'] }, { key: '.metadata.ownerReferences.[].kind', operator: 'In', values: ['Job'] }],
      { statusTemplate: POD_SUCCEEDED },
      { durationFrom: { jq: { expression: `.metadata.annotations["${FLEET_ANNOTATIONS.runFor}"]` } } },
    ),
    stage('pod-delete', 'Pod', [{ key: '.metadata.deletionTimestamp', operator: 'Exists' }], { delete: true }),
  ];
}
