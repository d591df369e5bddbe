package cdc_apply.delta;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Iterator;

import io.delta.storage.HadoopFileSystemLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import software.amazon.awssdk.core.exception.SdkServiceException;

/**
 * A Delta log store for s3a:// whose commits are exclusive across processes: version N's file is created
 * with S3's conditional put (If-None-Match: *), so of two writers committing N one gets the object and the
 * other a java.nio.file.FileAlreadyExistsException, on which Delta re-reads the log and retries at N+1 (or
 * fails on a logical conflict), as on HDFS or Azure. Delta's default for s3a, S3SingleDriverLogStore,
 * excludes writers only within one JVM: Hadoop 3.4's FileSystem.create(path, false) checks for the object
 * and then puts it without a condition, and only the createFile() builder option
 * fs.option.create.conditional.overwrite makes S3A send If-None-Match. delta-rs writes commits with the same
 * conditional put, so a Spark writer and a delta-rs writer exclude each other too.
 *
 * Set with spark.delta.logStore.s3a.impl=cdc_apply.delta.S3ConditionalPutLogStore (and .s3.impl for s3://)
 * in every Spark writer of the table. The store must honour conditional writes (AWS S3 since August 2024,
 * MinIO, Cloudflare R2); S3A refuses the write with "Conditional Writes Unavailable" when
 * fs.s3a.create.conditional.enabled is false.
 */
public class S3ConditionalPutLogStore extends HadoopFileSystemLogStore {

    /** Hadoop's createFile() option (Options.CreateFileOptionKeys.FS_OPTION_CREATE_CONDITIONAL_OVERWRITE). */
    public static final String CONDITIONAL_OVERWRITE = "fs.option.create.conditional.overwrite";

    public S3ConditionalPutLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        byte[] content = render(actions);
        if (overwrite) {
            try (FSDataOutputStream out = fs.create(path, true)) {
                out.write(content);
            }
            return;
        }
        try {
            FSDataOutputStream out = (FSDataOutputStream) fs.createFile(path).overwrite(false).recursive()
                    .must(CONDITIONAL_OVERWRITE, true).build();
            try {
                out.write(content);
            } finally {
                out.close();      // the put, conditional on no object at the path
            }
        } catch (IOException e) {
            if (!taken(e)) {
                throw e;
            }
            // A put retried after its first attempt landed sees its own object: that is our commit.
            if (Arrays.equals(content, readAll(fs, path))) {
                return;
            }
            java.nio.file.FileAlreadyExistsException exists =
                    new java.nio.file.FileAlreadyExistsException(path.toString());
            exists.initCause(e);
            throw exists;
        }
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;     // an S3 object appears whole
    }

    private static byte[] render(Iterator<String> actions) {
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        while (actions.hasNext()) {
            byte[] line = (actions.next() + "\n").getBytes(StandardCharsets.UTF_8);
            buffer.write(line, 0, line.length);
        }
        return buffer.toByteArray();
    }

    private static byte[] readAll(FileSystem fs, Path path) {
        try (FSDataInputStream in = fs.open(path)) {
            return readStream(in);
        } catch (IOException e) {
            return null;
        }
    }

    private static byte[] readStream(InputStream in) throws IOException {
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        byte[] chunk = new byte[8192];
        int n;
        while ((n = in.read(chunk)) > 0) {
            buffer.write(chunk, 0, n);
        }
        return buffer.toByteArray();
    }

    /** Whether the put failed because the object exists (412) or a concurrent conditional put holds it (409). */
    private static boolean taken(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof org.apache.hadoop.fs.FileAlreadyExistsException) {
                return true;
            }
            if (t instanceof SdkServiceException) {
                int status = ((SdkServiceException) t).statusCode();
                return status == 412 || status == 409;
            }
        }
        return false;
    }
}
