// bench/sched.sh's Java workload: the JVM's start-up (its GC, JIT compiler and service threads) and a print.
public class Hello {
    public static void main(String[] args) {
        System.out.println("hello");
    }
}
