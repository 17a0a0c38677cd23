// The engine worker's script: the browser entry registers the platform (the wasm builds fetched beside their glue, as
// in a page), then one `Host` (host.ts) serves the pages that reach it (links.ts): as a dedicated Worker, its page;
// as the origin's SharedWorker, each page that connects; as a leader tab's worker (named `LEADER_WORKER`), the pages
// of the origin over the leader's BroadcastChannel, after announcing itself there.
import '../browser.js';
import { Host, type Peer } from './host.js';
import { LEADER_WORKER } from './links.js';
import { LEADER_CHANNEL, type ChannelMessage, type Reply, type Request } from './protocol.js';

interface Scope {
  name: string;
  onmessage: ((event: MessageEvent<Request>) => void) | null;
  onconnect?: ((event: MessageEvent) => void) | null;
  postMessage(message: Reply, transfer?: Transferable[]): void;
}

const scope = self as unknown as Scope;
const host = new Host();

if ('onconnect' in scope) {
  // A SharedWorker: a port per page.
  scope.onconnect = ({ ports: [port] }) => {
    const peer: Peer = { post: (reply, transfer = []) => port.postMessage(reply, transfer) };
    port.onmessage = ({ data }: MessageEvent<Request>) => host.receive(peer, data);
  };
} else if (scope.name === LEADER_WORKER) {
  // A leader tab's worker: the pages' requests arrive on the channel by sender; replies go back addressed to it
  // (cloned: a channel transfers nothing).
  const id = crypto.randomUUID();
  const channel = new BroadcastChannel(LEADER_CHANNEL);
  const peers = new Map<string, Peer>();
  channel.onmessage = ({ data }: MessageEvent<ChannelMessage>) => {
    if (!('to' in data) || data.to !== 'host' || !('request' in data)) return;
    let peer = peers.get(data.from);
    if (!peer) {
      const to = data.from;
      peers.set(to, (peer = { post: (reply) => channel.postMessage({ to, host: id, reply } satisfies ChannelMessage) }));
    }
    if (data.request.op === 'bye') peers.delete(data.from);
    host.receive(peer, data.request);
  };
  channel.postMessage({ announce: id } satisfies ChannelMessage);
} else {
  // A dedicated worker: its page.
  const peer: Peer = { post: (reply, transfer = []) => scope.postMessage(reply, transfer) };
  scope.onmessage = ({ data }) => host.receive(peer, data);
}
