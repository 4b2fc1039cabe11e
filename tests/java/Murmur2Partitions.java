// Prints, for each UTF-8 line on stdin, the partition the Java client's default partitioner
// picks for that key: Utils.toPositive(Utils.murmur2(key)) % partitions.
// Run in source-file mode against the broker's own jars:
//   java -cp "<kafka libs>/*" tests/java/Murmur2Partitions.java 6 < ids.txt
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.utils.Utils;

public class Murmur2Partitions {
    public static void main(String[] args) throws Exception {
        int partitions = Integer.parseInt(args[0]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            byte[] key = line.getBytes(StandardCharsets.UTF_8);
            out.append(Utils.toPositive(Utils.murmur2(key)) % partitions).append('\n');
        }
        System.out.print(out);
    }
}
