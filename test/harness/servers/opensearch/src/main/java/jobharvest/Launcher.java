package jobharvest;

import java.nio.file.Path;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.opensearch.common.settings.Settings;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.Plugin;
import org.opensearch.transport.Netty4Plugin;

/**
 * Starts one OpenSearch node in this JVM: HTTP on 127.0.0.1 at the given port,
 * data under the given home, single-node discovery. Prints "started" once it
 * serves, and stops on SIGTERM.
 */
public final class Launcher {
  static final class EmbeddedNode extends Node {
    EmbeddedNode(Settings settings, Collection<Class<? extends Plugin>> plugins) {
      super(InternalSettingsPreparer.prepareEnvironment(settings, Map.of(), null, () -> "jobharvest-test"), plugins, true);
    }
  }

  public static void main(String[] args) throws Exception {
    Path home = Path.of(args[0]);
    String port = args[1];
    Settings settings = Settings.builder()
        .put("path.home", home.toString())
        .put("path.data", home.resolve("data").toString())
        .put("path.logs", home.resolve("logs").toString())
        .put("cluster.name", "jobharvest-test")
        .put("node.name", "jobharvest-test")
        .put("discovery.type", "single-node")
        .put("network.host", "127.0.0.1")
        .put("http.port", port)
        .put("transport.port", "0")
        // Tests share two cores and a small disk; no disk-watermark blocks.
        .put("cluster.routing.allocation.disk.threshold_enabled", false)
        .put("node.processors", 1)
        .build();
    Node node = new EmbeddedNode(settings, List.of(Netty4Plugin.class));
    node.start();
    // The node's threads are daemons: main must stay until SIGTERM.
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try {
        node.close();
      } catch (Exception e) {
        e.printStackTrace();
      } finally {
        stopped.countDown();
      }
    }));
    System.out.println("started");
    System.out.flush();
    stopped.await();
  }
}
