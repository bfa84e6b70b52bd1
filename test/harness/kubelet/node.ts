/**
 * The Node object: Ready, reachable at 127.0.0.1, with the port of the
 * kubelet's HTTPS endpoint, which is where the API server sends pods/log.
 */
import { PatchStrategy, setHeaderOptions, type CoreV1Api } from '@kubernetes/client-node';
import { arch } from 'node:os';

export async function registerNode(core: CoreV1Api, name: string, hostIP: string, kubeletPort: number): Promise<void> {
  // A Node left by an earlier run under the same name would carry stale addresses.
  await core.deleteNode({ name }).catch(() => undefined);
  const goArch = arch() === 'x64' ? 'amd64' : arch();
  await core.createNode({
    body: {
      metadata: { name, labels: { 'kubernetes.io/hostname': name, 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': goArch } },
      spec: {},
    },
  });
  const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
  const cond = (type: string, ok: boolean, reason: string) => ({ type, status: ok ? 'True' : 'False', reason, lastHeartbeatTime: now, lastTransitionTime: now });
  const resources = { cpu: '2', memory: '24Gi', pods: '110', 'ephemeral-storage': '100Gi' };
  await core.patchNodeStatus(
    {
      name,
      body: {
        status: {
          conditions: [
            cond('Ready', true, 'KubeletReady'),
            cond('MemoryPressure', false, 'KubeletHasSufficientMemory'),
            cond('DiskPressure', false, 'KubeletHasNoDiskPressure'),
            cond('PIDPressure', false, 'KubeletHasSufficientPID'),
          ],
          // Only an InternalIP: the API server dials the first address type it prefers.
          addresses: [{ type: 'InternalIP', address: hostIP }],
          daemonEndpoints: { kubeletEndpoint: { Port: kubeletPort } },
          capacity: resources,
          allocatable: resources,
          nodeInfo: {
            machineID: '',
            systemUUID: '',
            bootID: '',
            kernelVersion: '',
            osImage: 'jobharvest test kubelet',
            containerRuntimeVersion: 'jobharvest-test://0.1.0',
            kubeletVersion: 'v1.37.2',
            kubeProxyVersion: '',
            operatingSystem: 'linux',
            architecture: goArch,
          },
        },
      },
    },
    setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
  );
  // The TaintNodesByCondition admission plugin gives a new Node the
  // not-ready NoSchedule taint; the node lifecycle controller (not run here)
  // removes it once the Node is Ready. Schedulers that read taints (Kueue's
  // topology-aware scheduling) would otherwise see no usable node.
  const node = await core.readNode({ name });
  const taints = (node.spec?.taints ?? []).filter((t) => t.key !== 'node.kubernetes.io/not-ready');
  if (taints.length !== (node.spec?.taints ?? []).length) {
    await core.patchNode({ name, body: [{ op: 'replace', path: '/spec/taints', value: taints }] }, setHeaderOptions('Content-Type', PatchStrategy.JsonPatch));
  }
}
