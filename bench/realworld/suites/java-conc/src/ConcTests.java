// A test suite written for the repro corpus (not a third-party project): what a JDK program does with threads,
// timed waits and executors, checked the way a JUnit suite would, with a tiny runner (Maven Central is not
// reachable from the benchmark machine). Exit status 0 when every test passes, 1 otherwise.
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.*;

public final class ConcTests {
    interface Test { void run() throws Exception; }

    static void check(boolean cond, String what) {
        if (!cond) throw new AssertionError(what);
    }

    static void sleepIsAtLeastItsDuration() throws Exception {
        long t0 = System.nanoTime();
        Thread.sleep(50);
        long ms = (System.nanoTime() - t0) / 1_000_000;
        check(ms >= 50, "Thread.sleep(50) took " + ms + " ms");
    }

    static void timedConditionWaitTimesOut() throws Exception {
        ReentrantLock lock = new ReentrantLock();
        Condition cond = lock.newCondition();
        lock.lock();
        try {
            long t0 = System.nanoTime();
            boolean signalled = cond.await(100, TimeUnit.MILLISECONDS);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            check(!signalled, "nobody signals the condition");
            check(ms >= 100, "await(100 ms) returned after " + ms + " ms");
        } finally {
            lock.unlock();
        }
    }

    static void executorRunsEveryTask() throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(4);
        try {
            List<Future<Integer>> fs = new ArrayList<>();
            for (int i = 0; i < 100; i++) {
                final int n = i;
                fs.add(pool.submit(() -> n * n));
            }
            long sum = 0;
            for (Future<Integer> f : fs) sum += f.get(10, TimeUnit.SECONDS);
            check(sum == 328350, "sum of squares below 100 is " + sum);
        } finally {
            pool.shutdown();
            check(pool.awaitTermination(10, TimeUnit.SECONDS), "pool terminates");
        }
    }

    static void futureGetTimesOut() throws Exception {
        ExecutorService pool = Executors.newSingleThreadExecutor();
        CountDownLatch never = new CountDownLatch(1);
        try {
            Future<?> f = pool.submit(() -> { never.await(); return null; });
            try {
                f.get(80, TimeUnit.MILLISECONDS);
                check(false, "get() of a blocked task returned");
            } catch (TimeoutException expected) {
                // the point of the test
            }
        } finally {
            never.countDown();
            pool.shutdown();
            check(pool.awaitTermination(10, TimeUnit.SECONDS), "pool terminates");
        }
    }

    static void scheduledTasksRunInOrder() throws Exception {
        ScheduledExecutorService ses = Executors.newScheduledThreadPool(2);
        List<Integer> order = new CopyOnWriteArrayList<>();
        CountDownLatch done = new CountDownLatch(3);
        try {
            for (int d : new int[] {60, 20, 40}) {
                ses.schedule(() -> { order.add(d); done.countDown(); }, d, TimeUnit.MILLISECONDS);
            }
            check(done.await(10, TimeUnit.SECONDS), "three scheduled tasks ran");
            check(order.equals(List.of(20, 40, 60)), "ran in deadline order: " + order);
        } finally {
            ses.shutdown();
            check(ses.awaitTermination(10, TimeUnit.SECONDS), "scheduler terminates");
        }
    }

    static void producerConsumerThroughQueue() throws Exception {
        BlockingQueue<Integer> q = new ArrayBlockingQueue<>(8);
        AtomicInteger total = new AtomicInteger();
        Thread consumer = new Thread(() -> {
            try {
                for (;;) {
                    Integer v = q.poll(1, TimeUnit.SECONDS);
                    if (v == null || v < 0) return;
                    total.addAndGet(v);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        consumer.start();
        for (int i = 1; i <= 1000; i++) q.put(i);
        q.put(-1);
        consumer.join(10_000);
        check(!consumer.isAlive(), "consumer finished");
        check(total.get() == 500500, "consumed total " + total.get());
    }

    static void parallelStreamSums() {
        long s = java.util.stream.LongStream.rangeClosed(1, 2_000_000).parallel().sum();
        check(s == 2_000_001_000_000L, "parallel sum " + s);
    }

    public static void main(String[] args) {
        String[] names = {
            "sleepIsAtLeastItsDuration", "timedConditionWaitTimesOut", "executorRunsEveryTask",
            "futureGetTimesOut", "scheduledTasksRunInOrder", "producerConsumerThroughQueue", "parallelStreamSums",
        };
        Test[] tests = {
            ConcTests::sleepIsAtLeastItsDuration, ConcTests::timedConditionWaitTimesOut,
            ConcTests::executorRunsEveryTask, ConcTests::futureGetTimesOut, ConcTests::scheduledTasksRunInOrder,
            ConcTests::producerConsumerThroughQueue, ConcTests::parallelStreamSums,
        };
        int failed = 0;
        for (int i = 0; i < tests.length; i++) {
            try {
                tests[i].run();
                System.out.println("ok " + (i + 1) + " " + names[i]);
            } catch (Throwable t) {
                failed++;
                System.out.println("not ok " + (i + 1) + " " + names[i] + ": " + t);
            }
        }
        System.out.println("# " + (tests.length - failed) + " passed, " + failed + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }
}
