// A small Java program for spanprof's JFR tests: burns CPU in known methods on several
// threads, allocates in a known method, contends on one lock, parks, and waits in native code
// (a socket accept), for as long as asked.
// Usage: java Burn SECONDS
import java.net.ServerSocket;
import java.net.SocketTimeoutException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

public class Burn {
    static final Object LOCK = new Object();
    static volatile long sink;

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 2;
        long deadline = System.nanoTime() + seconds * 1_000_000_000L;
        List<Thread> threads = new ArrayList<>();
        threads.add(new Thread(() -> { while (System.nanoTime() < deadline) spinA(); }, "spin-a"));
        threads.add(new Thread(() -> { while (System.nanoTime() < deadline) spinB(); }, "spin-b"));
        threads.add(new Thread(() -> { while (System.nanoTime() < deadline) allocate(); }, "alloc"));
        for (int i = 0; i < 3; i++) {
            threads.add(new Thread(() -> { while (System.nanoTime() < deadline) contend(); }, "lock-" + i));
        }
        threads.add(new Thread(() -> { while (System.nanoTime() < deadline) park(); }, "park"));
        threads.add(new Thread(() -> waitInNative(deadline), "native"));
        for (Thread t : threads) t.start();
        for (Thread t : threads) t.join();
        System.out.println("done " + sink);
    }

    static void spinA() {
        long x = sink;
        for (int i = 0; i < 1_000_000; i++) x = x * 31 + i;
        sink = x;
    }

    static void spinB() {
        double x = sink;
        for (int i = 0; i < 500_000; i++) x = Math.sqrt(x + i);
        sink = (long) x;
    }

    static void allocate() {
        List<byte[]> keep = new ArrayList<>();
        for (int i = 0; i < 1000; i++) keep.add(new byte[1024 + (i % 7) * 4096]);
        sink += keep.size();
    }

    // Blocks in a native accept() until the deadline: jdk.NativeMethodSample events.
    static void waitInNative(long deadline) {
        try (ServerSocket server = new ServerSocket(0)) {
            long left;
            while ((left = (deadline - System.nanoTime()) / 1_000_000L) > 0) {
                server.setSoTimeout((int) Math.max(1, left));
                try {
                    server.accept().close();
                } catch (SocketTimeoutException e) {
                    // the deadline came
                }
            }
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    // Parks 25 ms at a time: jdk.ThreadPark events past a 1 ms threshold.
    static void park() {
        LockSupport.parkNanos(25_000_000L);
    }

    // Holds the lock for 30 ms at a time so that the other threads wait past the
    // JavaMonitorEnter threshold.
    static void contend() {
        synchronized (LOCK) {
            long until = System.nanoTime() + 30_000_000L;
            while (System.nanoTime() < until) sink++;
        }
    }
}
