package baton.fs;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system (checksums and all, still a {@link LocalFileSystem}), setting a file's
 * permissions with a system call instead of a {@code chmod} process.
 *
 * <p>Without Hadoop's native library, {@link RawLocalFileSystem#setPermission} runs {@code chmod}
 * through a shell for every file it creates (a thread to read the process's output, a spawn helper,
 * the {@code chmod}): a slot's batch writes its offsets and commit log entries and one changelog per
 * state partition, each with its checksum file, ~15 processes a batch. The permissions set are the
 * same; only how.
 */
public final class NoForkLocalFileSystem extends LocalFileSystem {
    public NoForkLocalFileSystem() {
        super(new Raw());
    }

    /** The raw file system under the checksums. */
    public static final class Raw extends RawLocalFileSystem {
        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            short mode = permission.toShort();
            if ((mode & ~0777) != 0) {  // a sticky bit: not a POSIX file permission to Java, Hadoop's way
                super.setPermission(p, permission);
                return;
            }
            Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(mode));
        }
    }

    private static final PosixFilePermission[] BITS = {  // from 0400 down to 0001
        PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE,
        PosixFilePermission.GROUP_READ, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE,
        PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE,
    };

    static Set<PosixFilePermission> posix(short mode) {
        Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
        for (int i = 0; i < BITS.length; i++) {
            if ((mode & (0400 >> i)) != 0) {
                set.add(BITS[i]);
            }
        }
        return set;
    }
}
